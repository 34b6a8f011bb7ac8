//! One attempt against one member with one credential — its call sent to its upstream
//! ([`crate::upstream::Upstream`]), whichever that is — and the classification of its outcome
//! (the table in docs/src/concepts/routing.md). The failover loop decides what to do next from
//! [`Failed::scope`].

use std::time::SystemTime;

use axum::body::Body;
use bytes::Bytes;
use http::{header, HeaderMap, StatusCode};
use http_body_util::BodyExt;
use switchyard_engine::{Channel, RandomSource};
use switchyard_provider::{
    answer_meta, count_tokens_response, parse_count_tokens_response, translate_error_body,
    translate_response, translate_responses_answer, Protocol, StreamTranslator, Usage,
};
use switchyard_state::FailureKind;
use tokio::time::timeout;

use crate::answer::{check_body, BodyCheck};
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::metrics::AttemptOutcome;
use crate::upstream::{
    json_headers, SendError, TransportCause, Upstream, UpstreamResponse, Upstreams,
};

pub use crate::upstream::Attempt;

/// Most bytes of a non-streamed success body inspected (and buffered) before forwarding.
const MAX_INSPECTED_BODY: usize = 16 * 1024 * 1024;
/// Most bytes of an upstream error body kept as the "last upstream answer".
const MAX_ERROR_BODY: usize = 1024 * 1024;
/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER_MS: u64 = 86_400_000;

/// Upstream error-body keywords that disable a credential (or the channel, when it has a single
/// key) on channels with `auto_ban`.
const BAN_KEYWORDS: &[&str] = &[
    "insufficient_quota",
    "exceeded your current quota",
    "quota exceeded",
    "invalid_api_key",
    "incorrect api key",
    "invalid x-api-key",
    "account_deactivated",
    "billing_hard_limit_reached",
    "credit balance is too low",
];

/// What happens after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Retryable: another credential / re-send on the same channel, then another member.
    SameChannel,
    /// Upstream 4xx: fail over to another member at once.
    OtherMember,
    /// Failure specific to this member: the same channel's other variants next.
    PreferChannel,
}

/// The last upstream answer, returned to the client if every attempt fails.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why an attempt failed (or, for [`AttemptError::CredentialUnresolved`], why a member could not
/// be attempted at all). The state-store kind and the failover scope follow from it, so the
/// classification is written once, here. Its log label is [`AttemptError::as_str`]; the derived
/// `Serialize` (tests only) is the oracle that label is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(serde::Serialize), serde(rename_all = "snake_case"))]
pub enum AttemptError {
    /// No answer head (or, for a stream, no first chunk) within the first-byte timeout.
    FirstByteTimeout,
    /// A JSON answer's body did not arrive within the idle timeout.
    BodyTimeout,
    ConnectError,
    /// The connection failed after it was up (not a stream).
    TransportError,
    /// The upstream request could not be built.
    BadUpstreamRequest,
    /// A JSON answer's body broke or exceeded the inspection limit.
    BodyReadError,
    /// A stream ended (or the connection closed) before its first data chunk.
    StreamCutBeforeFirstByte,
    /// A 2xx answer that is not the JSON it should be, or cannot be translated.
    MalformedResponse,
    /// A 2xx completion with no content at all.
    EmptyCompletion,
    /// 408, 429, 5xx, or the channel's own retryable codes and patterns.
    RetryableStatus,
    /// A 400/404 saying the upstream model does not exist.
    ModelNotFound,
    /// Any other upstream 4xx.
    RejectedStatus,
    /// No attempt: the engine saw a usable credential that this proxy cannot resolve.
    CredentialUnresolved,
}

impl AttemptError {
    /// The low-cardinality label in logs and spans.
    pub fn as_str(self) -> &'static str {
        use AttemptError::*;
        match self {
            FirstByteTimeout => "first_byte_timeout",
            BodyTimeout => "body_timeout",
            ConnectError => "connect_error",
            TransportError => "transport_error",
            BadUpstreamRequest => "bad_upstream_request",
            BodyReadError => "body_read_error",
            StreamCutBeforeFirstByte => "stream_cut_before_first_byte",
            MalformedResponse => "malformed_response",
            EmptyCompletion => "empty_completion",
            RetryableStatus => "retryable_status",
            ModelNotFound => "model_not_found",
            RejectedStatus => "rejected_status",
            CredentialUnresolved => "credential_unresolved",
        }
    }

    /// What the failure means to the state store.
    pub fn kind(self) -> FailureKind {
        use AttemptError::*;
        match self {
            FirstByteTimeout | BodyTimeout | ConnectError | TransportError | BadUpstreamRequest
            | BodyReadError | CredentialUnresolved => FailureKind::Transport,
            MalformedResponse | RetryableStatus => FailureKind::Retryable,
            StreamCutBeforeFirstByte | EmptyCompletion | ModelNotFound => {
                FailureKind::MemberSpecific
            }
            RejectedStatus => FailureKind::Rejected,
        }
    }

    /// Where the failover loop goes next.
    pub fn scope(self) -> Scope {
        match self.kind() {
            FailureKind::Transport | FailureKind::Retryable => Scope::SameChannel,
            FailureKind::MemberSpecific | FailureKind::StreamBroken => Scope::PreferChannel,
            FailureKind::Rejected => Scope::OtherMember,
        }
    }

    /// The error the client gets when every attempt failed without any upstream answer, this
    /// being the last failure.
    pub fn exhausted(self) -> GatewayError {
        match self {
            AttemptError::FirstByteTimeout | AttemptError::BodyTimeout => {
                GatewayError::UpstreamTimeout
            }
            AttemptError::StreamCutBeforeFirstByte => GatewayError::UpstreamStreamCut,
            _ => GatewayError::UpstreamUnreachable,
        }
    }
}

#[derive(Debug)]
pub struct Failed {
    pub error: AttemptError,
    /// What a failure in transport came down to (`None` for an answer, or a failure that is
    /// not the connection's).
    pub cause: Option<TransportCause>,
    pub status: Option<u16>,
    pub retry_after_ms: Option<u64>,
    pub answer: Option<Answer>,
    /// An auto-ban keyword matched in the error body.
    pub ban_keyword: Option<&'static str>,
}

impl Failed {
    /// A failure without an upstream answer.
    fn bare(error: AttemptError) -> Failed {
        // A timeout is its own cause; a connection's failure whose cause is not known, `other`.
        let cause = match error {
            AttemptError::FirstByteTimeout | AttemptError::BodyTimeout => {
                Some(TransportCause::Timeout)
            }
            AttemptError::ConnectError | AttemptError::TransportError => {
                Some(TransportCause::Other)
            }
            _ => None,
        };
        Failed {
            error,
            cause,
            status: None,
            retry_after_ms: None,
            answer: None,
            ban_keyword: None,
        }
    }

    /// A 2xx answer that failed the body check: the answer is kept as the last one.
    fn answered(error: AttemptError, status: StatusCode, answer: Answer) -> Failed {
        Failed {
            cause: None,
            status: Some(status.as_u16()),
            answer: Some(answer),
            ..Failed::bare(error)
        }
    }

    /// A failure of the connection, for `cause`.
    fn caused(error: AttemptError, cause: TransportCause) -> Failed {
        Failed {
            cause: Some(cause),
            ..Failed::bare(error)
        }
    }

    /// A send that got no answer head.
    fn unsent(error: SendError) -> Failed {
        match error {
            SendError::Timeout => Failed::bare(AttemptError::FirstByteTimeout),
            SendError::Connect(cause) => Failed::caused(AttemptError::ConnectError, cause),
            SendError::Transport(cause) => Failed::caused(AttemptError::TransportError, cause),
            SendError::StreamCut(cause) => Failed {
                cause: Some(cause),
                ..stream_cut()
            },
            SendError::BadRequest => Failed::bare(AttemptError::BadUpstreamRequest),
        }
    }

    pub fn kind(&self) -> FailureKind {
        self.error.kind()
    }

    pub fn scope(&self) -> Scope {
        self.error.scope()
    }

    pub fn outcome(&self) -> AttemptOutcome {
        match self.kind() {
            FailureKind::Transport => AttemptOutcome::Transport,
            FailureKind::Retryable => AttemptOutcome::Retryable,
            FailureKind::Rejected => AttemptOutcome::Rejected,
            FailureKind::MemberSpecific => AttemptOutcome::MemberSpecific,
            FailureKind::StreamBroken => AttemptOutcome::StreamBroken,
        }
    }
}

/// A response ready to go to the client.
pub struct Committed {
    pub response: UpstreamResponse,
    /// For streams: the first data chunk, already read (the rest is still in `response.body`)
    /// — translated already when `translator` is set.
    pub first_chunk: Option<Bytes>,
    /// A translated stream: the rest of the body goes through it (boxed: it is large, and
    /// most answers have none).
    pub translator: Option<Box<StreamTranslator>>,
    /// Usage read from a plain answer (streams count theirs as they go).
    pub usage: Option<Usage>,
    /// A plain JSON answer's body as the client gets it (a cheap clone of the bytes sent), for a
    /// shadow comparison.
    pub answer: Option<Bytes>,
    /// A passed-through stream the gateway asked for usage on the client's behalf: the usage
    /// chunk is removed on the way (see [`crate::wire::Call::strip_usage_chunk`]).
    pub strip_usage_chunk: bool,
}

pub enum Outcome {
    Committed(Committed),
    Failed(Failed),
}

impl Attempt<'_> {
    /// Sends the call to its upstream ([`Upstreams`]) and reads what comes back: a 2xx answer
    /// commits or fails its check, any other status is classified.
    pub async fn run(self, rng: &mut (impl RandomSource + Send)) -> Outcome {
        // The upstream's send awaited here, not in a function of its own: one future less
        // around the exchange, which is polled through every level above it.
        let sent = Upstreams::of(&self).send(&self, rng).await;
        let response = match sent {
            Ok(r) => r,
            Err(error) => return Outcome::Failed(Failed::unsent(error)),
        };
        if response.status.is_success() {
            self.on_success(response).await
        } else {
            Outcome::Failed(self.on_error(response).await)
        }
    }

    /// A 2xx answer: a stream commits with its first chunk (a whole JSON answer to a stream
    /// request becomes the client's stream of it), an answer that is not JSON to an endpoint
    /// whose answers are not all JSON (audio) as it is, any other answer once read whole and
    /// checked. An answer the gateway must read is refused when it is content-encoded (the
    /// gateway asks for `identity`).
    async fn on_success(&self, response: UpstreamResponse) -> Outcome {
        let stream = self.inspected.stream && self.call.local.is_none();
        let read = stream || self.endpoint.answers_json() || is_json(&response.headers);
        if let (true, Some(coding)) = (read, content_coding(&response.headers)) {
            let why = format!("it is encoded as `{coding}` though `identity` was asked");
            return Outcome::Failed(self.invalid(response.status, &why));
        }
        if stream && is_json(&response.headers) && !self.json_is_the_stream() {
            // Boxed: a rare branch, kept out of every answer's future.
            return Box::pin(self.answer_as_stream(response)).await;
        }
        if stream {
            return self.first_chunk(response).await;
        }
        if !read {
            return Outcome::Committed(Committed {
                response,
                first_chunk: None,
                translator: None,
                usage: None,
                strip_usage_chunk: false,
                answer: None,
            });
        }
        match self.whole_answer(response).await {
            Ok(committed) => Outcome::Committed(committed),
            Err(failed) => Outcome::Failed(failed),
        }
    }

    /// A stream commits once its first data chunk (translated, when the call is) is read within
    /// the first-byte timeout. Nothing has reached the client yet: a stream that dies before
    /// its first byte is a member-specific failure and fails over transparently.
    async fn first_chunk(&self, mut response: UpstreamResponse) -> Outcome {
        let limit = self.first_byte_limit();
        let mut translator = self.stream_translator();
        let first = timeout(
            limit,
            first_data(&mut response.body, translator.as_deref_mut()),
        )
        .await;
        match first {
            Ok(Ok(Some(first))) => {
                if translator.is_some() {
                    response.headers = sse_headers();
                }
                Outcome::Committed(Committed {
                    response,
                    first_chunk: Some(first),
                    translator,
                    usage: None,
                    strip_usage_chunk: self.call.strip_usage_chunk,
                    answer: None,
                })
            }
            Ok(Ok(None)) | Ok(Err(())) => Outcome::Failed(stream_cut()),
            Err(_) => Outcome::Failed(Failed::bare(AttemptError::FirstByteTimeout)),
        }
    }

    /// A translated stream's translator into the client's protocol (boxed: it is large).
    fn stream_translator(&self) -> Option<Box<StreamTranslator>> {
        self.call.translated().then(|| {
            Box::new(if self.endpoint == Endpoint::Responses {
                StreamTranslator::for_responses(self.call.upstream, self.inspected.model.as_str())
            } else {
                StreamTranslator::new(
                    self.call.upstream,
                    self.call.client,
                    self.inspected.model.as_str(),
                    self.call.include_usage,
                )
            })
        })
    }

    /// A plain JSON answer is read whole within the idle timeout, checked, and translated into
    /// the client's protocol when the call is; its usage is read on the way.
    async fn whole_answer(&self, mut response: UpstreamResponse) -> Result<Committed, Failed> {
        let body = self.read_whole(&mut response).await?;
        // A local answer is already in the client's shape. A passed-through answer's usage is
        // read by the same pass that checks it.
        let passthrough = !self.call.translated() || self.call.local.is_some();
        let read_usage = passthrough && self.endpoint.reports_usage();
        let read = self
            .check(&body, read_usage)
            .map_err(|error| self.refused(error, &response, &body))?;
        let span = tracing::Span::current();
        if !span.is_disabled() && self.call.local.is_none() {
            record_answer(&span, self.call.upstream, &body);
        }
        let (usage, answer) = if passthrough {
            (read, body)
        } else {
            let Some((translated, usage)) = self.translate_answer(&body) else {
                return Err(self.untranslatable(response.status));
            };
            response.headers = json_headers();
            (usage, Bytes::from(translated))
        };
        if let (false, Some(usage)) = (span.is_disabled(), usage) {
            span.record("gen_ai.usage.input_tokens", usage.input_tokens as i64);
            span.record("gen_ai.usage.output_tokens", usage.output_tokens as i64);
        }
        response.body = Body::from(answer.clone());
        Ok(Committed {
            response,
            first_chunk: None,
            translator: None,
            usage,
            strip_usage_chunk: false,
            answer: Some(answer),
        })
    }

    /// A stream request the upstream answered with one whole JSON answer (some OpenAI-compatible
    /// servers ignore `stream`): read and checked as a plain answer, then given to the client as
    /// the stream a live answer gives, properly ended. One without content (an error object
    /// with a 2xx among them), or to an endpoint whose stream cannot be made of it, is invalid.
    async fn answer_as_stream(&self, mut response: UpstreamResponse) -> Outcome {
        let status = response.status;
        let body = match self.read_whole(&mut response).await {
            Ok(body) => body,
            Err(failed) => return Outcome::Failed(failed),
        };
        let why = "a stream was asked, and it is a JSON answer without content";
        if let Err(error) = self.check(&body, false) {
            return Outcome::Failed(self.invalid_as(error, status, why));
        }
        let mut out = Vec::new();
        let converted = self.whole_translator().and_then(|mut translator| {
            translator.whole_answer(&body, &mut out).ok()?;
            Some(translator)
        });
        let Some(translator) = converted else {
            return Outcome::Failed(self.invalid(status, why));
        };
        response.headers = sse_headers();
        response.body = Body::empty();
        Outcome::Committed(Committed {
            response,
            first_chunk: Some(Bytes::from(out)),
            translator: Some(translator),
            usage: None,
            strip_usage_chunk: false,
            answer: None,
        })
    }

    /// The translator that makes a whole answer into the client's stream: chat endpoints, and
    /// the Responses API answered by a chat protocol.
    fn whole_translator(&self) -> Option<Box<StreamTranslator>> {
        let (upstream, model) = (self.call.upstream, self.inspected.model.as_str());
        if self.endpoint == Endpoint::Responses && self.call.translated() {
            return Some(Box::new(StreamTranslator::for_responses(upstream, model)));
        }
        self.endpoint.is_chat().then(|| {
            Box::new(StreamTranslator::new(
                upstream,
                self.call.client,
                model,
                self.call.include_usage,
            ))
        })
    }

    /// A Gemini client that did not ask for server-sent events streams a JSON array: passed
    /// through as it comes.
    fn json_is_the_stream(&self) -> bool {
        let sse = self
            .call
            .query
            .as_deref()
            .is_some_and(|q| q.split('&').any(|pair| pair == "alt=sse"));
        self.call.passthrough && self.call.client == Protocol::Gemini && !sse
    }

    /// The body of an answer read whole, within the idle timeout and the inspection limit.
    async fn read_whole(&self, response: &mut UpstreamResponse) -> Result<Bytes, Failed> {
        let limit = self.idle_limit();
        match timeout(limit, collect(&mut response.body, MAX_INSPECTED_BODY)).await {
            Ok(Ok(body)) => Ok(body),
            Ok(Err(())) => Err(Failed::bare(AttemptError::BodyReadError)),
            Err(_) => Err(Failed::bare(AttemptError::BodyTimeout)),
        }
    }

    /// A 2xx answer that failed the check: an empty completion is kept as the upstream's own
    /// answer; one that is not the JSON it should be (no body at all among them) is invalid.
    fn refused(&self, error: AttemptError, response: &UpstreamResponse, body: &Bytes) -> Failed {
        if error == AttemptError::EmptyCompletion {
            let answer = Answer {
                status: response.status,
                headers: response.headers.clone(),
                body: body.clone(),
            };
            return Failed::answered(error, response.status, answer);
        }
        let why = if body.is_empty() {
            "it has no body"
        } else {
            "it is not the JSON answer the endpoint gives"
        };
        self.invalid_as(error, response.status, why)
    }

    /// A 2xx answer that is not a valid one (`why`): malformed. Should it be the last, the
    /// client gets a 502 in its protocol saying why, never the answer as a success.
    fn invalid(&self, status: StatusCode, why: &str) -> Failed {
        self.invalid_as(AttemptError::MalformedResponse, status, why)
    }

    fn invalid_as(&self, error: AttemptError, status: StatusCode, why: &str) -> Failed {
        let gateway = GatewayError::UpstreamInvalidAnswer(why.to_owned());
        let answer = Answer {
            status: gateway.status(),
            headers: json_headers(),
            body: Bytes::from(gateway.body(self.call.client)),
        };
        Failed::answered(error, status, answer)
    }

    /// A fine 2xx answer's usage (with `read_usage`), or the error of one that is not the JSON
    /// it should be or has no content at all.
    fn check(&self, body: &Bytes, read_usage: bool) -> Result<Option<Usage>, AttemptError> {
        // A Responses request sent as Chat Completions (a member without the Responses API) is
        // answered as Chat Completions.
        let answered_as = if self.endpoint == Endpoint::Responses
            && self.call.translated()
            && self.call.upstream == Protocol::OpenAi
        {
            Endpoint::ChatCompletions
        } else {
            self.endpoint
        };
        match check_body(answered_as, self.call.upstream, body, read_usage) {
            BodyCheck::Fine(usage) => Ok(usage),
            BodyCheck::Malformed => Err(AttemptError::MalformedResponse),
            BodyCheck::Empty => Err(AttemptError::EmptyCompletion),
        }
    }

    /// A translated call's answer in the client's protocol, with the usage it reports (none for
    /// a count of tokens); `None` when it cannot be translated.
    fn translate_answer(&self, body: &Bytes) -> Option<(Vec<u8>, Option<Usage>)> {
        let (upstream, client) = (self.call.upstream, self.call.client);
        if self.endpoint.is_count_tokens() {
            parse_count_tokens_response(upstream, body)
                .map(|n| (count_tokens_response(client, n).into_bytes(), None))
        } else if self.endpoint == Endpoint::Responses {
            translate_responses_answer(upstream, body, self.inspected.model.as_str())
                .ok()
                .map(|(body, usage)| (body, Some(usage)))
        } else {
            translate_response(upstream, client, body, self.inspected.model.as_str())
                .ok()
                .map(|(body, usage)| (body, Some(usage)))
        }
    }

    /// A 2xx answer that cannot be translated: malformed, the client's last answer being a 502
    /// in its own protocol.
    fn untranslatable(&self, status: StatusCode) -> Failed {
        let answer = Answer {
            status: StatusCode::BAD_GATEWAY,
            headers: json_headers(),
            body: Bytes::from(translate_error_body(
                self.call.upstream,
                self.call.client,
                502,
                b"the upstream answer could not be translated",
            )),
        };
        Failed::answered(AttemptError::MalformedResponse, status, answer)
    }

    async fn on_error(&self, mut response: UpstreamResponse) -> Failed {
        let limit = self.idle_limit();
        let body = match timeout(limit, collect(&mut response.body, MAX_ERROR_BODY)).await {
            Ok(Ok(body)) => body,
            _ => Bytes::new(),
        };
        let status = response.status;
        let code = status.as_u16();
        if status == StatusCode::UNAUTHORIZED {
            // A Vertex access token the upstream refused is not used again.
            self.credential.forget_token();
        }
        // An encoded error body (the gateway asks for `identity`) says nothing the gateway can
        // read: it is classified and translated as an empty one (passed through as it came).
        let readable = match content_coding(&response.headers) {
            None => body.clone(),
            Some(_) => Bytes::new(),
        };
        let text = String::from_utf8_lossy(&readable).to_ascii_lowercase();
        let retry_after_ms = retry_after_ms(&response.headers);
        let error = classify_status(self.channel, code, &text);
        let ban_keyword = if self.channel.auto_ban {
            BAN_KEYWORDS.iter().copied().find(|k| text.contains(k))
        } else {
            None
        };
        // The client sees the upstream's answer in its own protocol, status and
        // `Retry-After` kept.
        let answer = if self.call.translated() {
            let mut headers = json_headers();
            if let Some(retry_after) = response.headers.get(header::RETRY_AFTER) {
                headers.insert(header::RETRY_AFTER, retry_after.clone());
            }
            Answer {
                status,
                headers,
                body: Bytes::from(translate_error_body(
                    self.call.upstream,
                    self.call.client,
                    code,
                    &readable,
                )),
            }
        } else {
            Answer {
                status,
                headers: response.headers,
                body,
            }
        };
        Failed {
            error,
            cause: None,
            status: Some(code),
            retry_after_ms,
            answer: Some(answer),
            ban_keyword,
        }
    }
}

pub(crate) fn sse_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    headers
}

/// The first chunk for the client: the next data chunk as is, or — translating — the first
/// non-empty translation (an upstream event may be split across chunks, or translate to
/// nothing, like a keep-alive). `Ok(None)` when the stream ends first.
async fn first_data(
    body: &mut Body,
    mut translator: Option<&mut StreamTranslator>,
) -> Result<Option<Bytes>, ()> {
    let mut out = Vec::new();
    loop {
        let Some(chunk) = next_data(body).await? else {
            if let Some(t) = translator.as_deref_mut() {
                if t.upstream_done() {
                    t.finish(&mut out);
                    if !out.is_empty() {
                        return Ok(Some(Bytes::from(out)));
                    }
                }
            }
            return Ok(None);
        };
        match translator.as_deref_mut() {
            None => return Ok(Some(chunk)),
            Some(t) => {
                t.push(&chunk, &mut out);
                if !out.is_empty() {
                    return Ok(Some(Bytes::from(out)));
                }
            }
        }
    }
}

fn stream_cut() -> Failed {
    Failed::bare(AttemptError::StreamCutBeforeFirstByte)
}

/// Transport/408/429/5xx and the channel's own codes/patterns are retryable; a "model not found"
/// answer (Azure's `DeploymentNotFound` too) is member-specific; any other 4xx is rejected (fail
/// over, cool the member, never counted for the breaker). The kind and the scope are those of the
/// returned error. (The attempt itself classifies with [`classify_status`]; this is its tests'
/// view.)
#[cfg(test)]
fn classify(
    channel: &Channel,
    status: u16,
    lowercase_body: &str,
) -> (FailureKind, Scope, AttemptError) {
    let error = classify_status(channel, status, lowercase_body);
    (error.kind(), error.scope(), error)
}

pub(crate) fn classify_status(
    channel: &Channel,
    status: u16,
    lowercase_body: &str,
) -> AttemptError {
    let retryable = status == 408
        || status == 429
        || status >= 500
        || channel.retry_status_codes.contains(&status)
        || channel
            .retry_error_patterns
            .iter()
            .any(|p| !p.is_empty() && lowercase_body.contains(&p.to_ascii_lowercase()));
    if retryable {
        return AttemptError::RetryableStatus;
    }
    let model_not_found = (status == 404 || status == 400)
        && (lowercase_body.contains("model_not_found")
            || lowercase_body.contains("model not found")
            || lowercase_body.contains("deploymentnotfound")
            || (lowercase_body.contains("publisher model")
                && lowercase_body.contains("not found"))
            || (lowercase_body.contains("model") && lowercase_body.contains("does not exist")));
    if model_not_found {
        return AttemptError::ModelNotFound;
    }
    AttemptError::RejectedStatus
}

/// `Retry-After` as milliseconds from now: delta-seconds or an HTTP date.
pub fn retry_after_ms(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    let ms = match value.parse::<u64>() {
        Ok(secs) => secs.saturating_mul(1000),
        Err(_) => {
            let at = httpdate::parse_http_date(value).ok()?;
            let left = at.duration_since(SystemTime::now()).unwrap_or_default();
            u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
        }
    };
    Some(ms.min(MAX_RETRY_AFTER_MS))
}

/// The answer's content coding, when it has one other than `identity`.
fn content_coding(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .find_map(|value| match value.to_str() {
            Ok(value) => value
                .split(',')
                .map(str::trim)
                .find(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity")),
            Err(_) => Some("(unreadable)"),
        })
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"))
}

/// The next non-empty data chunk; `Ok(None)` at the end, `Err` on a broken body.
pub async fn next_data(body: &mut Body) -> Result<Option<Bytes>, ()> {
    loop {
        match body.frame().await {
            None => return Ok(None),
            Some(Err(_)) => return Err(()),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    if !data.is_empty() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

async fn collect(body: &mut Body, max: usize) -> Result<Bytes, ()> {
    let mut out = bytes::BytesMut::new();
    let mut single: Option<Bytes> = None;
    while let Some(chunk) = next_data(body).await? {
        if out.len() + chunk.len() + single.as_ref().map_or(0, Bytes::len) > max {
            return Err(());
        }
        // The common case is one chunk: keep it without copying.
        match single.take() {
            None if out.is_empty() => single = Some(chunk),
            None => out.extend_from_slice(&chunk),
            Some(previous) => {
                out.extend_from_slice(&previous);
                out.extend_from_slice(&chunk);
            }
        }
    }
    Ok(single.unwrap_or_else(|| out.freeze()))
}

/// The answer's id, model and finish reasons on the attempt's span (GenAI conventions); the
/// content is never read into it.
fn record_answer(span: &tracing::Span, upstream: Protocol, body: &[u8]) {
    let meta = answer_meta(upstream, body);
    if let Some(id) = &meta.id {
        span.record("gen_ai.response.id", id.as_str());
    }
    if let Some(model) = &meta.model {
        span.record("gen_ai.response.model", model.as_str());
    }
    if !meta.finish_reasons.is_empty() {
        switchyard_telemetry::context::set_strings(
            span,
            "gen_ai.response.finish_reasons",
            meta.finish_reasons,
        );
    }
}

/// Every [`AttemptError`], in declaration order. Each variant names the next in one exhaustive
/// match: a new variant does not compile until it has an arm here, which should give it its
/// place in the chain (so every test that walks the list checks it).
#[cfg(test)]
pub(crate) fn every_attempt_error() -> Vec<AttemptError> {
    use AttemptError::*;
    let next = |error: Option<AttemptError>| match error {
        None => Some(FirstByteTimeout),
        Some(FirstByteTimeout) => Some(BodyTimeout),
        Some(BodyTimeout) => Some(ConnectError),
        Some(ConnectError) => Some(TransportError),
        Some(TransportError) => Some(BadUpstreamRequest),
        Some(BadUpstreamRequest) => Some(BodyReadError),
        Some(BodyReadError) => Some(StreamCutBeforeFirstByte),
        Some(StreamCutBeforeFirstByte) => Some(MalformedResponse),
        Some(MalformedResponse) => Some(EmptyCompletion),
        Some(EmptyCompletion) => Some(RetryableStatus),
        Some(RetryableStatus) => Some(ModelNotFound),
        Some(ModelNotFound) => Some(RejectedStatus),
        Some(RejectedStatus) => Some(CredentialUnresolved),
        Some(CredentialUnresolved) => None,
    };
    std::iter::successors(next(None), |&error| next(Some(error))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_error_label_is_its_serde_name() {
        let all = every_attempt_error();
        assert_eq!(all.len(), 13);
        for error in all {
            assert_eq!(
                serde_json::to_value(error).unwrap(),
                serde_json::Value::from(error.as_str()),
                "{error:?}"
            );
        }
    }
    use std::time::Duration;
    use switchyard_engine::Provider;

    fn channel() -> Channel {
        Channel {
            retry_status_codes: vec![418],
            retry_error_patterns: vec!["Try Again".into()],
            ..crate::testing::channel(Provider::Openai, true)
        }
    }

    #[test]
    fn classification_follows_the_spec_table() {
        let c = channel();
        let kind = |status, body: &str| classify(&c, status, &body.to_ascii_lowercase()).0;
        for status in [408, 429, 500, 502, 503, 504, 418] {
            assert_eq!(kind(status, ""), FailureKind::Retryable, "{status}");
        }
        assert_eq!(kind(400, "please try again later"), FailureKind::Retryable);
        assert_eq!(kind(400, "bad"), FailureKind::Rejected);
        assert_eq!(kind(401, ""), FailureKind::Rejected);
        assert_eq!(
            kind(404, r#"{"error":{"code":"model_not_found"}}"#),
            FailureKind::MemberSpecific
        );
        assert_eq!(
            kind(404, "The model `x` does not exist"),
            FailureKind::MemberSpecific
        );
        assert_eq!(kind(404, "no such route"), FailureKind::Rejected);
        // Azure's answer for a deployment the resource does not have.
        assert_eq!(
            kind(
                404,
                r#"{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist."}}"#
            ),
            FailureKind::MemberSpecific
        );
        // Its answer without an api-version (which the gateway always sends) is no such thing.
        assert_eq!(
            kind(
                404,
                r#"{"error":{"code":"404","message":"Resource not found"}}"#
            ),
            FailureKind::Rejected
        );
    }

    #[test]
    fn each_attempt_error_has_the_kind_and_scope_of_the_spec_table() {
        use AttemptError::*;
        let table = [
            (FirstByteTimeout, FailureKind::Transport, Scope::SameChannel),
            (BodyTimeout, FailureKind::Transport, Scope::SameChannel),
            (ConnectError, FailureKind::Transport, Scope::SameChannel),
            (TransportError, FailureKind::Transport, Scope::SameChannel),
            (
                BadUpstreamRequest,
                FailureKind::Transport,
                Scope::SameChannel,
            ),
            (BodyReadError, FailureKind::Transport, Scope::SameChannel),
            (
                MalformedResponse,
                FailureKind::Retryable,
                Scope::SameChannel,
            ),
            (RetryableStatus, FailureKind::Retryable, Scope::SameChannel),
            (
                StreamCutBeforeFirstByte,
                FailureKind::MemberSpecific,
                Scope::PreferChannel,
            ),
            (
                EmptyCompletion,
                FailureKind::MemberSpecific,
                Scope::PreferChannel,
            ),
            (
                ModelNotFound,
                FailureKind::MemberSpecific,
                Scope::PreferChannel,
            ),
            (RejectedStatus, FailureKind::Rejected, Scope::OtherMember),
        ];
        for (error, kind, scope) in table {
            assert_eq!((error.kind(), error.scope()), (kind, scope), "{error:?}");
            // The log label is the serialised name.
            assert_eq!(
                serde_json::to_value(error).unwrap(),
                serde_json::Value::from(error.as_str())
            );
        }
        let c = channel();
        assert_eq!(
            classify(&c, 503, ""),
            (FailureKind::Retryable, Scope::SameChannel, RetryableStatus)
        );
        assert_eq!(
            classify(&c, 401, ""),
            (FailureKind::Rejected, Scope::OtherMember, RejectedStatus)
        );
    }

    /// A send without an answer head is the attempt's failure of its kind, with the cause the
    /// upstream gave (a timeout is its own cause); nothing of an answer.
    #[test]
    fn an_unsent_call_fails_with_its_kind_and_cause() {
        use AttemptError::*;
        let reset = TransportCause::Reset;
        for (error, expected, cause) in [
            (
                SendError::Timeout,
                FirstByteTimeout,
                Some(TransportCause::Timeout),
            ),
            (SendError::Connect(reset), ConnectError, Some(reset)),
            (SendError::Transport(reset), TransportError, Some(reset)),
            (
                SendError::StreamCut(reset),
                StreamCutBeforeFirstByte,
                Some(reset),
            ),
            (SendError::BadRequest, BadUpstreamRequest, None),
        ] {
            let failed = Failed::unsent(error);
            assert_eq!((failed.error, failed.cause), (expected, cause), "{error:?}");
            assert!(
                failed.status.is_none() && failed.answer.is_none(),
                "{error:?}"
            );
        }
    }

    #[test]
    fn exhaustion_without_an_answer_names_the_last_failure() {
        assert_eq!(
            AttemptError::FirstByteTimeout.exhausted(),
            GatewayError::UpstreamTimeout
        );
        assert_eq!(
            AttemptError::BodyTimeout.exhausted(),
            GatewayError::UpstreamTimeout
        );
        assert_eq!(
            AttemptError::StreamCutBeforeFirstByte.exhausted(),
            GatewayError::UpstreamStreamCut
        );
        for other in [
            AttemptError::ConnectError,
            AttemptError::TransportError,
            AttemptError::CredentialUnresolved,
        ] {
            assert_eq!(other.exhausted(), GatewayError::UpstreamUnreachable);
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = HeaderMap::new();
        h.insert(header::RETRY_AFTER, http::HeaderValue::from_static("7"));
        assert_eq!(retry_after_ms(&h), Some(7000));
        let later = SystemTime::now() + Duration::from_secs(120);
        h.insert(
            header::RETRY_AFTER,
            http::HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let ms = retry_after_ms(&h).unwrap();
        assert!((110_000..=120_000).contains(&ms), "{ms}");
    }

    #[test]
    fn retry_after_is_honoured_up_to_a_day_and_capped_beyond() {
        let after = |value: String| {
            let mut h = HeaderMap::new();
            h.insert(
                header::RETRY_AFTER,
                http::HeaderValue::from_str(&value).unwrap(),
            );
            retry_after_ms(&h)
        };
        let day_secs = MAX_RETRY_AFTER_MS / 1000;
        assert_eq!(
            after((day_secs - 1).to_string()),
            Some(MAX_RETRY_AFTER_MS - 1000)
        );
        assert_eq!(after(day_secs.to_string()), Some(MAX_RETRY_AFTER_MS));
        assert_eq!(after((day_secs + 1).to_string()), Some(MAX_RETRY_AFTER_MS));
        assert_eq!(after(u64::MAX.to_string()), Some(MAX_RETRY_AFTER_MS));
        let in_two_days = SystemTime::now() + Duration::from_millis(2 * MAX_RETRY_AFTER_MS);
        assert_eq!(
            after(httpdate::fmt_http_date(in_two_days)),
            Some(MAX_RETRY_AFTER_MS)
        );
    }

    /// A body of `len` bytes in two chunks (the cap counts what came before, not one chunk).
    fn body_of(len: usize) -> Body {
        let half = len / 2;
        let chunks = [
            Bytes::from(vec![b'x'; half]),
            Bytes::from(vec![b'x'; len - half]),
        ];
        Body::from_stream(futures_util::stream::iter(
            chunks.map(Ok::<_, std::convert::Infallible>),
        ))
    }

    #[tokio::test]
    async fn a_success_or_error_body_is_read_up_to_its_cap_and_refused_beyond() {
        for max in [MAX_INSPECTED_BODY, MAX_ERROR_BODY] {
            for len in [max - 1, max] {
                let body = collect(&mut body_of(len), max).await;
                assert_eq!(body.map(|b| b.len()), Ok(len), "{len} bytes, cap {max}");
            }
            assert_eq!(
                collect(&mut body_of(max + 1), max).await,
                Err(()),
                "cap {max}"
            );
            assert_eq!(
                collect(&mut Body::from(vec![b'x'; max + 1]), max).await,
                Err(()),
                "one chunk over cap {max}"
            );
        }
    }
}
