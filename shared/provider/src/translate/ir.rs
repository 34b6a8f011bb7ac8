//! The neutral form a request and an answer are parsed into and rendered from, whatever the
//! protocol, with the helpers every protocol's translation shares. The bottom of the
//! translation modules: each protocol reads and writes it, and it calls none of them.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::protocol::Protocol;
use crate::usage::FullUsage;

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

    pub(crate) fn first_blocked(&self, target: Protocol, content_only: bool) -> Option<String> {
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

    pub(crate) fn estimate_tokens(&self) -> u64 {
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
