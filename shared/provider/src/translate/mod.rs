//! Requests: parsed once from the client's protocol into a neutral form, rendered for any target.

mod anthropic;
mod gemini;
mod openai;
mod responses;
pub(crate) mod schema;

use std::collections::HashMap;

use serde_json::{json, Map, Value};

pub(crate) use crate::error::malformed;
pub use crate::error::TranslateError;
use crate::protocol::Protocol;
use crate::usage::FullUsage;
use crate::util::{get_u64, parse_json_lenient, parse_object};

pub(crate) use anthropic::{
    anthropic_msg_id, emit_response as anthropic_emit_response,
    parse_response as anthropic_parse_response,
};
pub(crate) use gemini::{
    answer_parts as gemini_answer_parts, call_id as gemini_call_id,
    emit_response as gemini_emit_response, parse_response as gemini_parse_response,
};
pub(crate) use openai::{
    emit_response as openai_emit_response, openai_id, parse_response as openai_parse_response,
};
pub(crate) use responses::{
    call_item as responses_call_item, emit_response as responses_emit_response,
    message_item as responses_message_item, output_text as responses_output_text,
    response_id as responses_response_id, response_object as responses_response_object,
    usage as responses_usage,
};

// ---------------------------------------------------------------------------------------------
// The neutral form (IR)
// ---------------------------------------------------------------------------------------------

/// Why the model stopped, in neutral form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finish {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    /// A stop sequence matched (Anthropic says which one).
    StopSequence(Option<String>),
}

impl Finish {
    pub fn from_openai(s: &str) -> Finish {
        match s {
            "length" => Finish::Length,
            "tool_calls" | "function_call" => Finish::ToolCalls,
            "content_filter" => Finish::ContentFilter,
            _ => Finish::Stop,
        }
    }

    pub fn to_openai(&self) -> &'static str {
        match self {
            Finish::Stop | Finish::StopSequence(_) => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
            Finish::ContentFilter => "content_filter",
        }
    }

    pub fn from_anthropic(s: &str, stop_sequence: Option<&str>) -> Finish {
        match s {
            "max_tokens" | "model_context_window_exceeded" => Finish::Length,
            "tool_use" => Finish::ToolCalls,
            "stop_sequence" => Finish::StopSequence(stop_sequence.map(str::to_string)),
            "refusal" => Finish::ContentFilter,
            _ => Finish::Stop,
        }
    }

    /// `(stop_reason, stop_sequence)`.
    pub fn to_anthropic(&self) -> (&'static str, Option<String>) {
        match self {
            Finish::Stop => ("end_turn", None),
            Finish::StopSequence(s) => match s {
                Some(seq) => ("stop_sequence", Some(seq.clone())),
                None => ("end_turn", None),
            },
            Finish::Length => ("max_tokens", None),
            Finish::ToolCalls => ("tool_use", None),
            Finish::ContentFilter => ("refusal", None),
        }
    }

    pub fn from_gemini(s: &str) -> Finish {
        match s {
            "MAX_TOKENS" => Finish::Length,
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION"
            | "LANGUAGE" => Finish::ContentFilter,
            _ => Finish::Stop,
        }
    }

    pub fn to_gemini(&self) -> &'static str {
        match self {
            Finish::Stop | Finish::StopSequence(_) | Finish::ToolCalls => "STOP",
            Finish::Length => "MAX_TOKENS",
            Finish::ContentFilter => "SAFETY",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    /// Only `Part::Text` and `Part::ToolCall`, in order.
    pub parts: Vec<Part>,
    pub finish: Option<Finish>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resp {
    pub id: String,
    pub choices: Vec<Choice>,
    pub usage: FullUsage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MediaKind {
    Image,
    Audio,
    Video,
    Document,
    Other,
}

impl MediaKind {
    pub fn of_mime(mime: &str) -> MediaKind {
        let m = mime.to_ascii_lowercase();
        if m.starts_with("image/") {
            MediaKind::Image
        } else if m.starts_with("audio/") {
            MediaKind::Audio
        } else if m.starts_with("video/") {
            MediaKind::Video
        } else if m == "application/pdf" || m.starts_with("text/") {
            MediaKind::Document
        } else {
            MediaKind::Other
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    Base64(String),
    Url(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Media {
    pub kind: MediaKind,
    pub mime: Option<String>,
    pub source: Source,
}

impl Media {
    /// The MIME type, guessed from the URL's extension (or the kind) when not given.
    pub fn mime_or_guess(&self) -> String {
        if let Some(m) = &self.mime {
            return m.clone();
        }
        if let Source::Url(u) = &self.source {
            let path = u
                .split(['?', '#'])
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            for (ext, mime) in [
                (".png", "image/png"),
                (".jpg", "image/jpeg"),
                (".jpeg", "image/jpeg"),
                (".gif", "image/gif"),
                (".webp", "image/webp"),
                (".pdf", "application/pdf"),
                (".mp3", "audio/mpeg"),
                (".wav", "audio/wav"),
                (".mp4", "video/mp4"),
            ] {
                if path.ends_with(ext) {
                    return mime.to_string();
                }
            }
        }
        match self.kind {
            MediaKind::Image => "image/jpeg",
            MediaKind::Audio => "audio/wav",
            MediaKind::Video => "video/mp4",
            MediaKind::Document => "application/pdf",
            MediaKind::Other => "application/octet-stream",
        }
        .to_string()
    }

    /// A `data:` URL for base64 media, the URL otherwise.
    pub fn url(&self) -> String {
        match &self.source {
            Source::Url(u) => u.clone(),
            Source::Base64(d) => format!("data:{};base64,{d}", self.mime_or_guess()),
        }
    }
}

/// Parses `data:<mime>;base64,<data>` (other URLs give None).
pub(crate) fn parse_data_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let mime = meta.strip_suffix(";base64")?;
    Some((mime.to_string(), data.to_string()))
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Part {
    Text(String),
    Media(Media),
    /// `args` is the JSON text of the arguments.
    ToolCall {
        id: String,
        name: String,
        args: String,
    },
    ToolResult {
        id: String,
        name: Option<String>,
        content: Vec<Part>,
        is_error: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Msg {
    pub role: Role,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the parameters.
    pub schema: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolChoice {
    Auto,
    None,
    Required,
    Named(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ResponseFormat {
    JsonObject,
    JsonSchema {
        name: String,
        schema: Value,
        strict: Option<bool>,
    },
}

/// A request feature some protocols cannot express.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Feature {
    pub name: String,
    /// Indexed by [`Protocol::idx`]: true when that protocol cannot express it.
    pub blocked: [bool; 3],
    /// Whether it concerns the prompt (and so matters for token counting too).
    pub content: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Ir {
    pub system: Vec<String>,
    pub messages: Vec<Msg>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub stop: Vec<String>,
    pub n: Option<u64>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub response_format: Option<ResponseFormat>,
    /// Anthropic `thinking.budget_tokens` (-1: adaptive), rendered as Gemini `thinkingBudget`.
    pub thinking_budget: Option<i64>,
    pub user: Option<String>,
    pub features: Vec<Feature>,
}

pub(crate) const OPENAI: Protocol = Protocol::OpenAi;
pub(crate) const ANTHROPIC: Protocol = Protocol::Anthropic;
pub(crate) const GEMINI: Protocol = Protocol::Gemini;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctx {
    User,
    Assistant,
    ToolResult,
}

impl Ir {
    /// Records a feature `targets` cannot express.
    pub fn block(&mut self, name: impl Into<String>, targets: &[Protocol], content: bool) {
        let name = name.into();
        let mut blocked = [false; 3];
        for t in targets {
            blocked[t.idx()] = true;
        }
        if let Some(f) = self.features.iter_mut().find(|f| f.name == name) {
            for (b, n) in f.blocked.iter_mut().zip(blocked) {
                *b |= n;
            }
            return;
        }
        self.features.push(Feature {
            name,
            blocked,
            content,
        });
    }

    /// A system or developer message of `parts`: their text joins the system prompt; a part of
    /// another kind is recorded as `feature`, which `targets` cannot express.
    pub(crate) fn push_system(&mut self, parts: &[Part], feature: &str, targets: &[Protocol]) {
        if parts.iter().any(|p| !matches!(p, Part::Text(_))) {
            self.block(feature, targets, true);
        }
        self.system.push(joined_text(parts));
    }

    /// A user turn of `parts`.
    pub(crate) fn push_user(&mut self, parts: Vec<Part>) {
        self.messages.push(Msg {
            role: Role::User,
            parts,
        });
    }

    /// Records what the targets cannot express about one media part.
    pub fn check_media(&mut self, m: &Media, ctx: Ctx) {
        let mime = m.mime.clone().unwrap_or_default().to_ascii_lowercase();
        let url = match &m.source {
            Source::Url(u) => Some(u.as_str()),
            Source::Base64(_) => None,
        };
        if let Some(u) = url {
            let lower = u.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                self.block(
                    format!("non-HTTP file URI ({})", scheme(u)),
                    &[OPENAI, ANTHROPIC],
                    true,
                );
            } else if lower.contains("generativelanguage.googleapis.com/") {
                self.block("Gemini File API reference", &[OPENAI, ANTHROPIC], true);
            }
        }
        match m.kind {
            MediaKind::Image => {
                if url.is_none()
                    && ![
                        "image/jpeg",
                        "image/jpg",
                        "image/png",
                        "image/gif",
                        "image/webp",
                    ]
                    .contains(&mime.as_str())
                {
                    self.block(format!("image type {mime}"), &[OPENAI, ANTHROPIC], true);
                }
            }
            MediaKind::Audio => {
                let openai_ok = url.is_none()
                    && [
                        "audio/wav",
                        "audio/x-wav",
                        "audio/wave",
                        "audio/mpeg",
                        "audio/mp3",
                    ]
                    .contains(&mime.as_str());
                if openai_ok {
                    self.block("audio input", &[ANTHROPIC], true);
                } else {
                    self.block("audio input", &[ANTHROPIC, OPENAI], true);
                }
            }
            MediaKind::Document => {
                if mime != "application/pdf" && !mime.is_empty() {
                    self.block(format!("document type {mime}"), &[OPENAI, ANTHROPIC], true);
                } else if url.is_some() {
                    self.block("document (PDF) input by URL", &[OPENAI], true);
                }
            }
            MediaKind::Video => self.block("video input", &[OPENAI, ANTHROPIC], true),
            MediaKind::Other => {
                self.block(format!("file input ({mime})"), &[OPENAI, ANTHROPIC], true)
            }
        }
        match ctx {
            Ctx::User => {}
            Ctx::Assistant => self.block("media in an assistant turn", &[OPENAI, ANTHROPIC], true),
            Ctx::ToolResult => {
                self.block("media in a tool result", &[OPENAI, GEMINI], true);
            }
        }
    }

    fn first_blocked(&self, target: Protocol, content_only: bool) -> Option<String> {
        self.features
            .iter()
            .find(|f| f.blocked[target.idx()] && (!content_only || f.content))
            .map(|f| f.name.clone())
    }

    /// Tool-call id → function name, over every assistant turn.
    pub fn call_names(&self) -> HashMap<&str, &str> {
        let mut names = HashMap::new();
        for m in &self.messages {
            for p in &m.parts {
                if let Part::ToolCall { id, name, .. } = p {
                    names.insert(id.as_str(), name.as_str());
                }
            }
        }
        names
    }

    fn estimate_tokens(&self) -> u64 {
        fn part_chars(p: &Part, media: &mut u64) -> usize {
            match p {
                Part::Text(t) => t.chars().count(),
                Part::Media(_) => {
                    *media += 1;
                    0
                }
                Part::ToolCall { name, args, .. } => name.len() + args.chars().count(),
                Part::ToolResult { content, .. } => {
                    content.iter().map(|c| part_chars(c, media)).sum()
                }
            }
        }
        let mut media = 0u64;
        let mut chars: usize = self.system.iter().map(|s| s.chars().count()).sum();
        for m in &self.messages {
            chars += m
                .parts
                .iter()
                .map(|p| part_chars(p, &mut media))
                .sum::<usize>();
        }
        for t in &self.tools {
            chars += t.name.len();
            chars += t.description.as_deref().map_or(0, |d| d.chars().count());
            chars += t.schema.as_ref().map_or(0, |s| s.to_string().len());
        }
        (chars as u64).div_ceil(4) + media * MEDIA_TOKEN_ESTIMATE
    }
}

/// Tokens assumed per image/audio/document part in [`ChatRequest::estimate_input_tokens`].
pub const MEDIA_TOKEN_ESTIMATE: u64 = 258;

fn scheme(u: &str) -> &str {
    u.split_once(':').map_or("no scheme", |(s, _)| s)
}

/// Consecutive same-role messages merged (Anthropic and Gemini require alternation).
pub(crate) fn merged_turns(messages: &[Msg]) -> Vec<(Role, Vec<&Part>)> {
    let mut out: Vec<(Role, Vec<&Part>)> = Vec::new();
    for m in messages {
        match out.last_mut() {
            Some((role, parts)) if *role == m.role => parts.extend(m.parts.iter()),
            _ => out.push((m.role, m.parts.iter().collect())),
        }
    }
    out
}

/// The texts of tool-result content joined, for protocols whose tool results are text.
pub(crate) fn joined_text(parts: &[Part]) -> String {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

/// Arguments JSON text as an object (Anthropic `input`, Gemini `args` must be objects);
/// unparseable or non-object arguments become `{}`.
pub(crate) fn args_object(args: &str) -> Value {
    match serde_json::from_str::<Value>(args) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

// ---------------------------------------------------------------------------------------------
// ChatRequest
// ---------------------------------------------------------------------------------------------

/// A chat request parsed once from the client's protocol into a neutral form.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    protocol: Protocol,
    model: String,
    stream: bool,
    include_usage: bool,
    ir: Ir,
    /// The client's body (for Gemini: unwrapped from `generateContentRequest`), for
    /// same-protocol rendering.
    raw: Map<String, Value>,
    /// Gemini countTokens body given as `{"generateContentRequest": …}`.
    gemini_wrapped: bool,
    /// An OpenAI Responses API request (`POST /v1/responses`) rather than Chat Completions.
    responses: bool,
}

/// The Anthropic request fields an Anthropic count_tokens request leaves out (generation
/// settings and metadata; the translated request never carries `service_tier`).
const NOT_COUNTED: &[&str] = &[
    "max_tokens",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "metadata",
    "service_tier",
];

impl ChatRequest {
    /// Parses a request body of `protocol`. `model` and `stream` are authoritative for Gemini
    /// (they come from the URL: `:streamGenerateContent` means stream); for OpenAI and Anthropic
    /// they are read from the body and the arguments are only fallbacks. Also accepts
    /// count-tokens bodies (Anthropic without `max_tokens`; Gemini `{"contents": …}` or
    /// `{"generateContentRequest": …}`).
    pub fn parse(
        protocol: Protocol,
        body: &[u8],
        model: &str,
        stream: bool,
    ) -> Result<ChatRequest, TranslateError> {
        let mut raw = parse_object(body)?;
        let mut ir = Ir::default();
        let mut gemini_wrapped = false;
        let (model, stream, include_usage) = match protocol {
            Protocol::OpenAi => {
                openai::parse_request(&raw, &mut ir)?;
                let include_usage = raw
                    .get("stream_options")
                    .and_then(|o| o.get("include_usage"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                (
                    body_model(&raw, model),
                    body_stream(&raw, stream),
                    include_usage,
                )
            }
            Protocol::Anthropic => {
                anthropic::parse_request(&raw, &mut ir)?;
                (body_model(&raw, model), body_stream(&raw, stream), false)
            }
            Protocol::Gemini => {
                if let Some(inner) = raw.get("generateContentRequest") {
                    let Value::Object(inner) = inner.clone() else {
                        return Err(malformed("generateContentRequest is not an object"));
                    };
                    raw = inner;
                    gemini_wrapped = true;
                }
                gemini::parse_request(&raw, &mut ir)?;
                let model = if model.is_empty() {
                    raw.get("model")
                        .and_then(Value::as_str)
                        .map(|m| m.trim_start_matches("models/").to_string())
                        .unwrap_or_default()
                } else {
                    model.to_string()
                };
                (model, stream, false)
            }
        };
        if stream {
            // Streaming a second candidate/choice is not translated.
            if ir.n.is_some_and(|n| n > 1) {
                let name = match protocol {
                    Protocol::Gemini => "candidateCount > 1 with streaming",
                    _ => "n > 1 with streaming",
                };
                ir.block(name, &Protocol::ALL, false);
            }
        }
        Ok(ChatRequest {
            protocol,
            model,
            stream,
            include_usage,
            ir,
            raw,
            gemini_wrapped,
            responses: false,
        })
    }

    /// Parses an OpenAI Responses API request (`POST /v1/responses`): `input` items and
    /// `instructions`, function tools, calls and their outputs, `max_output_tokens`, sampling
    /// and `text.format`. Its protocol is OpenAI (errors are OpenAI's); what only OpenAI can do
    /// (`previous_response_id`, `background`, built-in tools, …) is a feature Anthropic and
    /// Gemini cannot express. Answers go back through [`crate::translate_responses_answer`].
    pub fn parse_responses(
        body: &[u8],
        model: &str,
        stream: bool,
    ) -> Result<ChatRequest, TranslateError> {
        let raw = parse_object(body)?;
        let mut ir = Ir::default();
        responses::parse_request(&raw, &mut ir)?;
        let stream = body_stream(&raw, stream);
        Ok(ChatRequest {
            protocol: Protocol::OpenAi,
            model: body_model(&raw, model),
            stream,
            include_usage: false,
            ir,
            raw,
            gemini_wrapped: false,
            responses: true,
        })
    }

    /// Whether this is a Responses API request that asks for its response to be stored
    /// (`store` true, or absent: the Responses API's default).
    pub fn asks_to_store(&self) -> bool {
        self.responses && self.raw.get("store").and_then(Value::as_bool) != Some(false)
    }

    /// Records `feature` as something no other protocol than the client's can serve: members
    /// that would need translation become unsupported for this request, naming it (for a
    /// Responses API request, members taking it as Chat Completions too).
    pub fn keep_to_own_protocol(&mut self, feature: &str) {
        let others: Vec<Protocol> = [Protocol::OpenAi, ANTHROPIC, GEMINI]
            .into_iter()
            .filter(|p| self.responses || *p != self.protocol)
            .collect();
        self.ir.block(feature, &others, false);
    }

    /// Whether this is a Responses API request (see [`ChatRequest::parse_responses`]).
    pub fn is_responses(&self) -> bool {
        self.responses
    }

    /// The client's protocol.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The model the client asked for.
    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn stream(&self) -> bool {
        self.stream
    }

    /// OpenAI `stream_options.include_usage` (false for other protocols).
    pub fn include_usage(&self) -> bool {
        self.include_usage
    }

    /// The first request feature `target` cannot express, if any. None when `target` is the
    /// client's protocol.
    pub fn unsupported_for(&self, target: Protocol) -> Option<String> {
        if target == self.protocol {
            return None;
        }
        self.ir.first_blocked(target, false)
    }

    /// The request body in `target`'s protocol for `upstream_model` (for Gemini the model goes
    /// in the URL, not the body). Anthropic targets get `default_max_tokens` when the client
    /// gave no limit; streaming OpenAI targets get `stream_options.include_usage: true`.
    pub fn to_body(
        &self,
        target: Protocol,
        upstream_model: &str,
        default_max_tokens: u32,
    ) -> Result<Vec<u8>, TranslateError> {
        let v = if target == self.protocol {
            self.same_protocol_body(upstream_model, default_max_tokens)
        } else {
            if let Some(f) = self.unsupported_for(target) {
                return Err(TranslateError::Unsupported(f));
            }
            match target {
                Protocol::OpenAi => openai::emit_request(&self.ir, upstream_model, self.stream),
                Protocol::Anthropic => anthropic::emit_request(
                    &self.ir,
                    upstream_model,
                    self.stream,
                    Some(u64::from(default_max_tokens)),
                ),
                Protocol::Gemini => gemini::emit_request(&self.ir)?,
            }
        };
        to_vec(&v)
    }

    /// The first feature of this Responses API request that Chat Completions cannot express
    /// (stored state, background runs, built-in tools, …), for an OpenAI-compatible member that
    /// has no Responses API. None for every other request.
    pub fn unsupported_for_chat_completions(&self) -> Option<String> {
        if !self.responses {
            return None;
        }
        self.ir.first_blocked(Protocol::OpenAi, false)
    }

    /// This Responses API request as a Chat Completions body for `upstream_model` (streaming
    /// bodies ask for the final usage chunk), for an OpenAI-compatible member that has no
    /// Responses API. Refused for other requests, and for a Responses request using a feature
    /// Chat Completions cannot express.
    pub fn to_chat_completions_body(
        &self,
        upstream_model: &str,
    ) -> Result<Vec<u8>, TranslateError> {
        if !self.responses {
            return Err(TranslateError::Unsupported(
                "a Chat Completions body from anything but a Responses API request".into(),
            ));
        }
        if let Some(f) = self.unsupported_for_chat_completions() {
            return Err(TranslateError::Unsupported(f));
        }
        to_vec(&openai::emit_request(&self.ir, upstream_model, self.stream))
    }

    /// A count-tokens body for `target` (Anthropic `/v1/messages/count_tokens`, Gemini
    /// `:countTokens` in its `generateContentRequest` form). OpenAI has no count endpoint:
    /// `Unsupported`.
    pub fn to_count_tokens_body(
        &self,
        target: Protocol,
        upstream_model: &str,
    ) -> Result<Vec<u8>, TranslateError> {
        if target == Protocol::OpenAi {
            return Err(TranslateError::Unsupported(
                "count_tokens (OpenAI has no count endpoint)".into(),
            ));
        }
        let v = if target == self.protocol {
            match target {
                Protocol::Anthropic => {
                    let mut m = self.raw.clone();
                    m.insert("model".into(), json!(upstream_model));
                    for k in NOT_COUNTED {
                        m.remove(*k);
                    }
                    Value::Object(m)
                }
                _ => {
                    if self.gemini_wrapped {
                        let mut m = self.raw.clone();
                        m.insert("model".into(), json!(format!("models/{upstream_model}")));
                        json!({"generateContentRequest": m})
                    } else {
                        Value::Object(self.raw.clone())
                    }
                }
            }
        } else {
            if let Some(f) = self.ir.first_blocked(target, true) {
                return Err(TranslateError::Unsupported(f));
            }
            match target {
                Protocol::Anthropic => {
                    let mut v = anthropic::emit_request(&self.ir, upstream_model, false, None);
                    if let Value::Object(m) = &mut v {
                        for k in NOT_COUNTED {
                            m.remove(*k);
                        }
                    }
                    v
                }
                _ => {
                    let mut inner = gemini::emit_request(&self.ir)?;
                    if let Value::Object(m) = &mut inner {
                        m.remove("generationConfig");
                        m.insert("model".into(), json!(format!("models/{upstream_model}")));
                    }
                    json!({"generateContentRequest": inner})
                }
            }
        };
        to_vec(&v)
    }

    /// A rough prompt-token estimate: characters/4 over all text (system, messages, tool calls
    /// and results, tool names, descriptions and schemas), plus [`MEDIA_TOKEN_ESTIMATE`] per
    /// media part.
    pub fn estimate_input_tokens(&self) -> u64 {
        self.ir.estimate_tokens()
    }

    fn same_protocol_body(&self, upstream_model: &str, default_max_tokens: u32) -> Value {
        let mut m = self.raw.clone();
        match self.protocol {
            Protocol::OpenAi if self.responses => {
                m.insert("model".into(), json!(upstream_model));
            }
            Protocol::OpenAi => {
                m.insert("model".into(), json!(upstream_model));
                if self.stream {
                    let mut so = match m.remove("stream_options") {
                        Some(Value::Object(o)) => o,
                        _ => Map::new(),
                    };
                    so.insert("include_usage".into(), json!(true));
                    m.insert("stream_options".into(), Value::Object(so));
                }
            }
            Protocol::Anthropic => {
                m.insert("model".into(), json!(upstream_model));
                m.entry("max_tokens").or_insert(json!(default_max_tokens));
            }
            Protocol::Gemini => {
                m.remove("model");
            }
        }
        Value::Object(m)
    }
}

fn body_model(body: &Map<String, Value>, fallback: &str) -> String {
    body.get("model")
        .and_then(Value::as_str)
        .unwrap_or(fallback)
        .to_string()
}

fn body_stream(body: &Map<String, Value>, fallback: bool) -> bool {
    body.get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(fallback)
}

pub(crate) fn to_vec(v: &Value) -> Result<Vec<u8>, TranslateError> {
    serde_json::to_vec(v).map_err(|e| malformed(format!("cannot serialize: {e}")))
}

// ---------------------------------------------------------------------------------------------
// Count tokens
// ---------------------------------------------------------------------------------------------

/// A count-tokens answer in `client`'s shape: Anthropic `{"input_tokens":N}`, Gemini
/// `{"totalTokens":N}`, OpenAI (Responses `input_tokens` shape)
/// `{"object":"response.input_tokens","input_tokens":N}`.
pub fn count_tokens_response(client: Protocol, tokens: u64) -> String {
    match client {
        Protocol::Anthropic => json!({"input_tokens": tokens}),
        Protocol::Gemini => json!({"totalTokens": tokens}),
        Protocol::OpenAi => json!({"object": "response.input_tokens", "input_tokens": tokens}),
    }
    .to_string()
}

/// N from a count-tokens answer of `upstream`'s protocol (`input_tokens` / `totalTokens`).
pub fn parse_count_tokens_response(upstream: Protocol, body: &[u8]) -> Option<u64> {
    let v = parse_json_lenient(body)?;
    match upstream {
        Protocol::Gemini => get_u64(&v, "totalTokens"),
        Protocol::Anthropic | Protocol::OpenAi => get_u64(&v, "input_tokens"),
    }
}

#[cfg(test)]
mod tests;
