//! Reads only what routing needs from a request body, and rewrites the model in place.
//!
//! The body is never re-serialised: `model` is located as a byte span and spliced, so every
//! other byte reaches the upstream exactly as the client sent it.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use memchr::memmem;
use serde::Deserialize;
use serde_json::value::RawValue;
use switchyard_engine::{RequestNeeds, Token};

use switchyard_proto::sha256_hex;

pub const PIN_HEADER: &str = "x-switchyard-pin-member";

/// Header names the request path reads or writes on every request, made at compile time: a name
/// given as `&str` is parsed and validated again on every lookup or insert.
pub(crate) mod names {
    use http::HeaderName;

    pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    pub const SWITCHYARD_REQUEST_ID: HeaderName =
        HeaderName::from_static("x-switchyard-request-id");
    pub const ROUTE: HeaderName = HeaderName::from_static("x-switchyard-route");
    pub const CHANNEL: HeaderName = HeaderName::from_static("x-switchyard-channel");
    pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-switchyard-attempts");
    pub const ROUTE_GROUP: HeaderName = HeaderName::from_static("x-switchyard-route-group");
    pub const PIN: HeaderName = HeaderName::from_static(crate::request::PIN_HEADER);
    pub const SESSION_ID: HeaderName = HeaderName::from_static("x-session-id");
    pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
    pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
    pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
    pub const CACHE: HeaderName = HeaderName::from_static("x-switchyard-cache");
    pub const CACHE_SIMILARITY: HeaderName =
        HeaderName::from_static("x-switchyard-cache-similarity");
}

/// What routing needs to know about one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inspected {
    pub model: String,
    /// Byte range of the model's value in the body (with its quotes for JSON); for a model
    /// given by default ([`inspect_json_defaulting`]), the `null` it replaces or the empty range
    /// right after the body's `{` where it goes.
    model_span: Option<(usize, usize)>,
    /// The body names no model (or `null`): the model is a default, written into the body for
    /// every member.
    model_defaulted: bool,
    json: bool,
    pub stream: bool,
    pub needs: RequestNeeds,
    /// Session key from the body fields (`prompt_cache_key`, `session_id`, `metadata.user_id`,
    /// `conversation_id`); see [`Inspected::body_session`].
    session_field: Option<String>,
    /// Byte range of the first user message's content, hashed only when stickiness needs it.
    first_user_span: Option<(usize, usize)>,
    /// Number of embedding inputs (for the simulation).
    pub inputs: usize,
    /// `background: true` (a Responses request the upstream keeps running on its own).
    pub background: bool,
    /// Byte range of the `stream` value (JSON bodies).
    stream_span: Option<(usize, usize)>,
    /// The body's `metadata.tags` (checked; the header's tags take their place when given).
    pub tags: Vec<String>,
    /// OpenAI's `user`, else Anthropic's `metadata.user_id` (checked).
    pub end_user: Option<String>,
    /// What the body says about OpenAI's `stream_options.include_usage`.
    stream_usage: StreamUsage,
    /// The output the request may produce, when it says (`max_tokens`, `max_completion_tokens`,
    /// `max_output_tokens`, Gemini's `generationConfig.maxOutputTokens`): part of the token
    /// estimate a tokens limit admits it with.
    pub max_output_tokens: Option<u64>,
}

/// OpenAI's `stream_options` as a request carries it.
#[derive(Debug, Clone, Default, PartialEq)]
enum StreamUsage {
    /// No `stream_options` (or `null`, at that byte range).
    #[default]
    Absent,
    Null(usize, usize),
    /// An object without `include_usage: true`, at that byte range.
    NotAsked(usize, usize),
    /// `include_usage: true`: the client asked for the usage chunk.
    Asked,
    /// Something else (not an object): left alone, the upstream judges it.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InspectError {
    Malformed(String),
    MissingModel,
    /// A multipart body names this field more than once.
    DuplicateField(&'static str),
    /// The request's tags or end user break their bounds (the message says how).
    Attribution(String),
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    functions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response_format: Option<&'a RawValue>,
    #[serde(borrow, default)]
    prompt_cache_key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    session_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    conversation_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow, default)]
    background: Option<&'a RawValue>,
    #[serde(borrow, default)]
    user: Option<&'a RawValue>,
    #[serde(borrow, default)]
    max_tokens: Option<&'a RawValue>,
    #[serde(borrow, default)]
    max_completion_tokens: Option<&'a RawValue>,
    #[serde(borrow, default)]
    max_output_tokens: Option<&'a RawValue>,
    #[serde(
        borrow,
        default,
        rename = "generationConfig",
        alias = "generation_config"
    )]
    generation_config: Option<&'a RawValue>,
    /// `null` included (`Some("null")`): its bytes are replaced when usage is asked for.
    #[serde(borrow, default, deserialize_with = "raw_even_null")]
    stream_options: Option<&'a RawValue>,
}

/// A field's raw value, `null` included (a plain `Option<&RawValue>` reads `null` as absent).
fn raw_even_null<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct TypeOnly<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct StreamOptions<'a> {
    #[serde(borrow, default)]
    include_usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct GenerationConfig<'a> {
    #[serde(
        borrow,
        default,
        rename = "maxOutputTokens",
        alias = "max_output_tokens"
    )]
    max_output_tokens: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow, default)]
    user_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tags: Option<&'a RawValue>,
}

/// A JSON string's value, or the raw text of any other scalar; `None` for null/empty.
fn scalar(raw: Option<&RawValue>) -> Option<String> {
    let text = raw?.get();
    if text == "null" {
        return None;
    }
    let value = match serde_json::from_str::<String>(text) {
        Ok(s) => s,
        Err(_) => text.to_owned(),
    };
    (!value.is_empty()).then_some(value)
}

fn offset_in(body: &[u8], part: &str) -> usize {
    (part.as_ptr() as usize).saturating_sub(body.as_ptr() as usize)
}

/// Inspects a JSON request body.
pub fn inspect_json(body: &[u8]) -> Result<Inspected, InspectError> {
    inspect_json_for(body, None)
}

/// Only a body's `model`, `null` included (absent is `None`).
#[derive(Deserialize)]
struct ModelOnly<'a> {
    #[serde(borrow, default, deserialize_with = "raw_even_null")]
    model: Option<&'a RawValue>,
}

/// Inspects a JSON request body of an endpoint whose model may be left out (moderations): a
/// body without `model` (or with `model: null`) is routed as `default_model`, and the member's
/// upstream model is written into what is sent upstream ([`Inspected::rewrite`]).
pub fn inspect_json_defaulting(
    body: &[u8],
    default_model: &str,
) -> Result<Inspected, InspectError> {
    match inspect_json_for(body, None) {
        Err(InspectError::MissingModel) => {}
        other => return other,
    }
    let only: ModelOnly<'_> = serde_json::from_slice(body)
        .map_err(|e| InspectError::Malformed(format!("request body is not valid JSON: {e}")))?;
    let span = match only.model {
        None => {
            // Right after the object's `{` (the body starts with it, whitespace aside).
            let open = body
                .iter()
                .position(|b| *b == b'{')
                .ok_or(InspectError::MissingModel)?;
            (open + 1, open + 1)
        }
        Some(raw) if raw.get() == "null" => span_in(body, raw),
        // A blank string: the client named no model, and gets told so.
        Some(_) => return Err(InspectError::MissingModel),
    };
    // Read as if a path named the model: no stream (moderations never stream).
    let mut out = inspect_json_for(body, Some((default_model, false)))?;
    out.model_span = Some(span);
    out.model_defaulted = true;
    Ok(out)
}

/// Where `raw` (a slice of `body`) lies in it.
fn span_in(body: &[u8], raw: &RawValue) -> (usize, usize) {
    let start = offset_in(body, raw.get());
    (start, start + raw.get().len())
}

/// Inspects a JSON request body whose model (and stream flag) the path gives, as Gemini's
/// `/v1beta/models/{model}:{action}` does; the body then carries no model to rewrite.
pub fn inspect_json_for(
    body: &[u8],
    path_model: Option<(&str, bool)>,
) -> Result<Inspected, InspectError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(InspectError::Malformed(
            "request body must be a JSON object".into(),
        ));
    }
    let probe: Probe<'_> = serde_json::from_slice(body)
        .map_err(|e| InspectError::Malformed(format!("request body is not valid JSON: {e}")))?;
    let mut out = inspect_model(body, &probe, path_model)?;
    out.json = true;
    out.stream_span = probe.stream.map(|raw| span_in(body, raw));
    out.stream_usage = stream_usage(body, probe.stream_options);
    out.needs.streaming = out.stream;
    out.background = probe.background.is_some_and(|b| b.get() == "true");
    let gemini_max = probe
        .generation_config
        .and_then(|raw| serde_json::from_str::<GenerationConfig>(raw.get()).ok())
        .and_then(|g| g.max_output_tokens);
    out.max_output_tokens = [
        probe.max_tokens,
        probe.max_completion_tokens,
        probe.max_output_tokens,
        gemini_max,
    ]
    .into_iter()
    .flatten()
    .find_map(|raw| raw.get().parse::<u64>().ok());
    out.needs.estimated_prompt_tokens = Some(u32::try_from(body.len() / 4).unwrap_or(u32::MAX));
    out.needs.tools = [probe.tools, probe.functions]
        .into_iter()
        .flatten()
        .any(|raw| raw.get().starts_with('[') && raw.get() != "[]");
    out.needs.json_mode = probe
        .response_format
        .and_then(|raw| serde_json::from_str::<TypeOnly>(raw.get()).ok())
        .and_then(|t| t.kind)
        .is_some_and(|k| k == "json_object" || k == "json_schema");

    let conversation = probe
        .messages
        .or(probe.input.filter(|i| i.get().starts_with('[')));
    let (first_user, vision) = read_conversation(conversation);
    out.needs.vision = vision;
    let metadata = probe
        .metadata
        .and_then(|raw| serde_json::from_str::<Metadata>(raw.get()).ok());
    attribute(&mut out, probe.user, metadata.as_ref())?;
    let metadata_user = metadata.and_then(|m| scalar(m.user_id));
    out.session_field = scalar(probe.prompt_cache_key)
        .or_else(|| scalar(probe.session_id))
        .or(metadata_user)
        .or_else(|| scalar(probe.conversation_id));
    out.first_user_span = first_user.map(|c| span_in(body, c));
    out.inputs = input_count(probe.input);
    Ok(out)
}

/// The request's tags (`metadata.tags`) and end user (`user`, else `metadata.user_id`), checked
/// ([`crate::attribution`]).
fn attribute(
    out: &mut Inspected,
    user: Option<&RawValue>,
    metadata: Option<&Metadata<'_>>,
) -> Result<(), InspectError> {
    use crate::attribution::{end_user, metadata_tags};
    if let Some(raw) = metadata.and_then(|m| m.tags) {
        out.tags = metadata_tags(raw.get()).map_err(InspectError::Attribution)?;
    }
    let named = match scalar(user) {
        Some(user) => Some(("user", user)),
        None => metadata
            .and_then(|m| scalar(m.user_id))
            .map(|u| ("metadata.user_id", u)),
    };
    if let Some((field, value)) = named {
        out.end_user = end_user(field, value).map_err(InspectError::Attribution)?;
    }
    Ok(())
}

/// The model: the path's, else the body's `model` (a non-blank string, with its place in the
/// body so that it can be rewritten), checked either way.
fn inspect_model(
    body: &[u8],
    probe: &Probe<'_>,
    path_model: Option<(&str, bool)>,
) -> Result<Inspected, InspectError> {
    if let Some((model, stream)) = path_model {
        if model.trim().is_empty() {
            return Err(InspectError::MissingModel);
        }
        check_model(model)?;
        return Ok(Inspected {
            model: model.to_owned(),
            stream,
            ..Inspected::default()
        });
    }
    let raw_model = probe.model.ok_or(InspectError::MissingModel)?;
    let model: String = serde_json::from_str(raw_model.get())
        .map_err(|_| InspectError::Malformed("`model` must be a string".into()))?;
    if model.trim().is_empty() {
        return Err(InspectError::MissingModel);
    }
    check_model(&model)?;
    Ok(Inspected {
        model,
        model_span: Some(span_in(body, raw_model)),
        stream: probe.stream.is_some_and(|s| s.get() == "true"),
        ..Inspected::default()
    })
}

/// What the body's `stream_options` says about the usage chunk, with its place when the gateway
/// may have to change it.
fn stream_usage(body: &[u8], options: Option<&RawValue>) -> StreamUsage {
    match options {
        None => StreamUsage::Absent,
        Some(raw) if raw.get() == "null" => {
            let (start, end) = span_in(body, raw);
            StreamUsage::Null(start, end)
        }
        Some(raw) => match serde_json::from_str::<StreamOptions>(raw.get()) {
            Ok(options) if options.include_usage.is_some_and(|u| u.get() == "true") => {
                StreamUsage::Asked
            }
            Ok(_) => {
                let (start, end) = span_in(body, raw);
                StreamUsage::NotAsked(start, end)
            }
            Err(_) => StreamUsage::Other,
        },
    }
}

/// The first user message's content (the session key's fallback) and whether any message
/// carries an image, from a conversation (`messages`, or a Responses `input` list).
fn read_conversation(conversation: Option<&RawValue>) -> (Option<&RawValue>, bool) {
    let mut first_user: Option<&RawValue> = None;
    let mut vision = false;
    let Some(raw) = conversation else {
        return (None, false);
    };
    let Ok(messages) = serde_json::from_str::<Vec<Message>>(raw.get()) else {
        return (None, false);
    };
    for m in &messages {
        let Some(content) = m.content else { continue };
        if first_user.is_none() && m.role.as_deref() == Some("user") {
            first_user = Some(content);
        }
        if !vision && content.get().starts_with('[') {
            if let Ok(parts) = serde_json::from_str::<Vec<Part>>(content.get()) {
                vision = parts.iter().any(|p| {
                    matches!(
                        p.kind.as_deref(),
                        Some("image_url" | "input_image" | "image")
                    )
                });
            }
        }
    }
    (first_user, vision)
}

/// How many inputs an embeddings request carries: a list of strings (or of token lists) is one
/// each; anything else is one.
fn input_count(input: Option<&RawValue>) -> usize {
    input
        .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok())
        .map_or(1, |items| {
            let nested = items
                .first()
                .is_some_and(|i| i.get().starts_with('"') || i.get().starts_with('['));
            if nested {
                items.len()
            } else {
                1
            }
        })
}

/// RFC 2046 caps a multipart boundary at 70 characters; anything longer is refused.
const MAX_BOUNDARY: usize = 70;

/// Inspects a `multipart/form-data` body (audio transcriptions): only the `model` and `stream`
/// fields are read. Linear in the body (memchr's two-way search, each needle built once).
pub fn inspect_multipart(body: &[u8], content_type: &str) -> Result<Inspected, InspectError> {
    let [model, stream] = multipart_fields(body, content_type, ["model", "stream"])?;
    let mut out = Inspected {
        inputs: 1,
        ..Inspected::default()
    };
    if let Some((start, end)) = model {
        out.model = String::from_utf8_lossy(&body[start..end]).trim().to_owned();
        out.model_span = Some((start, end));
    }
    out.stream = stream.is_some_and(|(start, end)| &body[start..end] == b"true");
    if out.model.is_empty() {
        return Err(InspectError::MissingModel);
    }
    check_model(&out.model)?;
    out.needs.streaming = out.stream;
    Ok(out)
}

/// The byte spans of the values of the fields `wanted` of a `multipart/form-data` body (`None`
/// for a field it lacks). A wanted field given twice, or a part with several names one of which
/// is wanted, is refused: what the gateway reads must be what an upstream reads. Linear in the
/// body (memchr's two-way search, each needle built once).
pub fn multipart_fields<const N: usize>(
    body: &[u8],
    content_type: &str,
    wanted: [&'static str; N],
) -> Result<[Option<(usize, usize)>; N], InspectError> {
    let boundary = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .next()
        .map(|b| b.trim_matches('"'))
        .filter(|b| !b.is_empty())
        .ok_or_else(|| InspectError::Malformed("multipart body without a boundary".into()))?;
    if boundary.len() > MAX_BOUNDARY {
        return Err(InspectError::Malformed(format!(
            "multipart boundary longer than {MAX_BOUNDARY} characters"
        )));
    }
    let delimiter = format!("--{boundary}");
    let next_part = memmem::Finder::new(delimiter.as_bytes());
    let value_end = format!("\r\n{delimiter}");
    let value_end = memmem::Finder::new(value_end.as_bytes());
    let head_end = memmem::Finder::new(b"\r\n\r\n");
    let mut found = [None; N];
    let mut at = 0;
    while let Some(pos) = body.get(at..).and_then(|rest| next_part.find(rest)) {
        let part_start = at + pos + delimiter.len();
        let Some(headers_len) = head_end.find(&body[part_start..]) else {
            break;
        };
        let headers = &body[part_start..part_start + headers_len];
        let value_start = part_start + headers_len + 4;
        let Some(value_len) = value_end.find(&body[value_start..]) else {
            break;
        };
        let headers = String::from_utf8_lossy(headers);
        let names = part_names(&headers);
        for (i, field) in wanted.iter().enumerate() {
            if names.iter().any(|n| n == field) {
                // Routing, team and price policy read one value; an upstream might read another.
                if found[i].is_some() || names.len() > 1 {
                    return Err(InspectError::DuplicateField(field));
                }
                found[i] = Some((value_start, value_start + value_len));
            }
        }
        at = value_start + value_len;
    }
    Ok(found)
}

/// The field names a part's headers give it: the `name` (or RFC 2231 `name*`) parameter of
/// each `content-disposition` header, the parameter name matched in any case and the value quoted
/// or not (a `filename` is not a name). Usually one; more than one makes the part ambiguous.
fn part_names(headers: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in headers.split("\r\n") {
        let Some((field, value)) = line.split_once(':') else {
            continue;
        };
        if !field.trim().eq_ignore_ascii_case("content-disposition") {
            continue;
        }
        for param in parameters(value) {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let key = key.trim();
            let value = value.trim();
            if key.eq_ignore_ascii_case("name") {
                names.push(unquote(value));
            } else if key.eq_ignore_ascii_case("name*") {
                // charset'language'percent-encoded: the encoded text after the second quote.
                let encoded = value.rsplit('\'').next().unwrap_or(value);
                names.push(percent_decoded(encoded));
            }
        }
    }
    names
}

/// A header value's `;`-separated parameters (a `;` inside a quoted string does not separate).
fn parameters(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in value.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => {
                out.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&value[start..]);
    out
}

/// A parameter value without its quotes and backslash escapes.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"') else {
        return value.to_owned();
    };
    let inner = inner.strip_suffix('"').unwrap_or(inner);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    out
}

/// `%XX` escapes decoded (bytes that are not UTF-8 replaced).
pub(crate) fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The longest model name accepted (names are echoed in errors and logged).
pub const MAX_MODEL_LEN: usize = 256;

pub(crate) fn check_model(model: &str) -> Result<(), InspectError> {
    if model.len() > MAX_MODEL_LEN {
        return Err(InspectError::Malformed(format!(
            "`model` is longer than {MAX_MODEL_LEN} bytes"
        )));
    }
    if model.chars().any(char::is_control) {
        return Err(InspectError::Malformed(
            "`model` contains control characters".into(),
        ));
    }
    Ok(())
}

/// The bytes that put a defaulted model into a JSON body at `start..end`: the value in place of
/// a `null`, or a whole `"model"` member right after the `{` (followed by a comma when other
/// members follow).
fn defaulted_model(body: &[u8], start: usize, end: usize, model: &str) -> Option<Vec<u8>> {
    let value = serde_json::to_string(model).ok()?;
    if start != end {
        return Some(value.into_bytes());
    }
    let empty = body
        .get(end..)?
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'}');
    let comma = if empty { "" } else { "," };
    Some(format!("\"model\":{value}{comma}").into_bytes())
}

impl Inspected {
    /// The session key from the body: a session field, else a hash of the first user message.
    pub fn body_session(&self, body: &[u8]) -> Option<String> {
        if let Some(key) = &self.session_field {
            return Some(key.clone());
        }
        let (start, end) = self.first_user_span?;
        Some(format!("msg:{}", sha256_hex(body.get(start..end)?)))
    }

    /// The body with `model` replaced by `upstream_model`; the original bytes when unchanged.
    pub fn rewrite(&self, body: &Bytes, upstream_model: &str) -> Bytes {
        self.rewrite_with(body, upstream_model, false)
    }

    /// The client asked for OpenAI's stream usage chunk (`stream_options.include_usage: true`).
    pub fn asked_stream_usage(&self) -> bool {
        self.stream_usage == StreamUsage::Asked
    }

    /// Whether this is an OpenAI-style JSON stream whose client did not ask for the usage chunk
    /// (`stream_options.include_usage`) and whose body can ask for it: `stream_options` absent,
    /// `null` or an object.
    pub fn can_ask_stream_usage(&self) -> bool {
        self.json
            && self.stream
            && self.stream_span.is_some()
            && matches!(
                self.stream_usage,
                StreamUsage::Absent | StreamUsage::Null(..) | StreamUsage::NotAsked(..)
            )
    }

    /// [`rewrite`](Self::rewrite), and with `ask_usage` (when
    /// [`can_ask_stream_usage`](Self::can_ask_stream_usage)) `stream_options.include_usage`
    /// set to `true`: added after `stream` when there are no `stream_options`, the value
    /// replaced when it is `null` or an object without it (its other options kept). Every
    /// other byte stays as the client sent it.
    pub fn rewrite_with(&self, body: &Bytes, upstream_model: &str, ask_usage: bool) -> Bytes {
        let mut edits: Vec<(usize, usize, Cow<'_, [u8]>)> = Vec::with_capacity(2);
        let rewritten = self.model_defaulted || self.model != upstream_model;
        if let Some((start, end)) = self.model_span.filter(|_| rewritten) {
            let replacement: Cow<'_, [u8]> = if self.model_defaulted {
                match defaulted_model(body, start, end, upstream_model) {
                    Some(bytes) => Cow::Owned(bytes),
                    None => return body.clone(),
                }
            } else if self.json {
                match serde_json::to_string(upstream_model) {
                    Ok(s) => Cow::Owned(s.into_bytes()),
                    Err(_) => return body.clone(),
                }
            } else {
                Cow::Borrowed(upstream_model.as_bytes())
            };
            edits.push((start, end, replacement));
        }
        if ask_usage && self.can_ask_stream_usage() {
            match (&self.stream_usage, self.stream_span) {
                (StreamUsage::Absent, Some((_, end))) => edits.push((
                    end,
                    end,
                    Cow::Borrowed(b",\"stream_options\":{\"include_usage\":true}"),
                )),
                (StreamUsage::Null(start, end), _) => {
                    edits.push((*start, *end, Cow::Borrowed(b"{\"include_usage\":true}")))
                }
                (StreamUsage::NotAsked(start, end), _) => {
                    let options = body.get(*start..*end).and_then(|raw| {
                        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(raw)
                            .ok()
                    });
                    let Some(mut options) = options else {
                        return body.clone();
                    };
                    options.insert("include_usage".to_owned(), serde_json::Value::Bool(true));
                    match serde_json::to_vec(&options) {
                        Ok(bytes) => edits.push((*start, *end, Cow::Owned(bytes))),
                        Err(_) => return body.clone(),
                    }
                }
                _ => {}
            }
        }
        if edits.is_empty() {
            return body.clone();
        }
        edits.sort_by_key(|(start, _, _)| *start);
        let added: usize = edits.iter().map(|(_, _, r)| r.len()).sum();
        let mut out = BytesMut::with_capacity(body.len() + added);
        let mut at = 0;
        for (start, end, replacement) in &edits {
            let Some(before) = body.get(at..*start) else {
                return body.clone();
            };
            out.extend_from_slice(before);
            out.extend_from_slice(replacement);
            at = *end;
        }
        let Some(after) = body.get(at..) else {
            return body.clone();
        };
        out.extend_from_slice(after);
        out.freeze()
    }
}

/// The route group a request is selected in: the key's own group, else the one the client's
/// group header names.
pub fn route_group(token: &Token, headers: &http::HeaderMap) -> Option<String> {
    token.route_group_name.clone().or_else(|| {
        headers
            .get(&names::ROUTE_GROUP)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    })
}

/// A session key from the `x-session-id` header: hashed when over 256 bytes.
pub fn header_session_key(value: &[u8]) -> Option<String> {
    if value.is_empty() {
        None
    } else if value.len() > 256 {
        Some(format!("sha256:{}", sha256_hex(value)))
    } else {
        Some(String::from_utf8_lossy(value).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_changes_only_the_model_bytes() {
        let body = Bytes::from_static(
            br#"{ "messages": [{"role":"user","content":"hi"}], "model" : "alias",  "x": 1.50 }"#,
        );
        let req = inspect_json(&body).unwrap();
        assert_eq!(req.model, "alias");
        let out = req.rewrite(&body, "real-\"model\"");
        assert_eq!(
            &out[..],
            &br#"{ "messages": [{"role":"user","content":"hi"}], "model" : "real-\"model\"",  "x": 1.50 }"#[..]
        );
        assert_eq!(req.rewrite(&body, "alias"), body);
    }

    #[test]
    fn a_body_without_a_model_gets_the_default_written_in_for_every_member() {
        let json = |b: &Bytes| serde_json::from_slice::<serde_json::Value>(b).unwrap();
        let absent = Bytes::from_static(br#" { "input": "hi" }"#);
        let req = inspect_json_defaulting(&absent, "omni").unwrap();
        assert_eq!((req.model.as_str(), req.stream), ("omni", false));
        let out = req.rewrite(&absent, "up");
        assert_eq!(&out[..], br#" {"model":"up", "input": "hi" }"#);
        // Even when the member's model is the default itself.
        assert_eq!(json(&req.rewrite(&absent, "omni"))["model"], "omni");
        // An empty object gets no stray comma; a `null` model is replaced in place.
        let empty = Bytes::from_static(b"{ }");
        let out = inspect_json_defaulting(&empty, "omni")
            .unwrap()
            .rewrite(&empty, "up");
        assert_eq!(&out[..], br#"{"model":"up" }"#);
        let null = Bytes::from_static(br#"{"model":null,"input":"x"}"#);
        let out = inspect_json_defaulting(&null, "omni")
            .unwrap()
            .rewrite(&null, "up");
        assert_eq!(&out[..], br#"{"model":"up","input":"x"}"#);
        // A model the body names is used as any other endpoint's; a blank one is refused.
        let named = inspect_json_defaulting(br#"{"model":"text-moderation-stable"}"#, "omni");
        assert_eq!(named.unwrap().model, "text-moderation-stable");
        assert_eq!(
            inspect_json_defaulting(br#"{"model":" ","input":"x"}"#, "omni"),
            Err(InspectError::MissingModel)
        );
        assert!(matches!(
            inspect_json_defaulting(br#"{"input":"#, "omni"),
            Err(InspectError::Malformed(_))
        ));
        // Other endpoints still require one.
        assert_eq!(
            inspect_json(br#"{"input":"hi"}"#),
            Err(InspectError::MissingModel)
        );
    }

    #[test]
    fn the_output_asked_for_is_read_from_each_protocols_field() {
        let max = |body: &str| inspect_json(body.as_bytes()).unwrap().max_output_tokens;
        assert_eq!(max(r#"{"model":"m","max_tokens":256}"#), Some(256));
        assert_eq!(max(r#"{"model":"m","max_completion_tokens":64}"#), Some(64));
        assert_eq!(max(r#"{"model":"m","max_output_tokens":32}"#), Some(32));
        assert_eq!(
            max(r#"{"model":"m","generationConfig":{"maxOutputTokens":16}}"#),
            Some(16)
        );
        assert_eq!(max(r#"{"model":"m","max_tokens":"lots"}"#), None);
        assert_eq!(max(r#"{"model":"m","max_tokens":-3}"#), None);
        assert_eq!(max(r#"{"model":"m"}"#), None);
    }

    /// An OpenAI stream is asked for its usage: `stream_options.include_usage` spliced in (after
    /// `stream`, or in place of a `null` or object value), never a second `stream_options` key;
    /// every other byte as the client sent it.
    #[test]
    fn stream_usage_is_asked_for_with_every_other_byte_kept() {
        let cases = [
            (
                r#"{"model":"a","stream":true,"messages":[]}"#,
                Some(
                    r#"{"model":"b","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#,
                ),
            ),
            (
                r#"{"stream" : true , "stream_options" : null, "model":"a"}"#,
                Some(
                    r#"{"stream" : true , "stream_options" : {"include_usage":true}, "model":"b"}"#,
                ),
            ),
            (
                r#"{"model":"a","stream":true,"stream_options":{"include_usage":false}}"#,
                Some(r#"{"model":"b","stream":true,"stream_options":{"include_usage":true}}"#),
            ),
            (
                r#"{"model":"a","stream":true,"stream_options":{"include_usage":true}}"#,
                None,
            ),
            (r#"{"model":"a","stream":false}"#, None),
            (r#"{"model":"a"}"#, None),
            (r#"{"model":"a","stream":true,"stream_options":"x"}"#, None),
        ];
        for (body, want) in cases {
            let body = Bytes::from(body);
            let req = inspect_json(&body).unwrap();
            let out = req.rewrite_with(&body, "b", true);
            match want {
                Some(want) => {
                    assert!(req.can_ask_stream_usage(), "{body:?}");
                    assert_eq!(String::from_utf8_lossy(&out), want);
                }
                None => {
                    assert!(!req.can_ask_stream_usage(), "{body:?}");
                    assert_eq!(out, req.rewrite(&body, "b"), "{body:?}");
                }
            }
            assert_eq!(req.rewrite_with(&body, "b", false), req.rewrite(&body, "b"));
        }
        let asked =
            inspect_json(br#"{"model":"a","stream":true,"stream_options":{"include_usage":true}}"#)
                .unwrap();
        assert!(asked.asked_stream_usage());
        for body in [
            &br#"{"model":"a","stream":true,"stream_options":{"include_usage":false}}"#[..],
            br#"{"model":"a","stream":true}"#,
        ] {
            assert!(!inspect_json(body).unwrap().asked_stream_usage());
        }
    }

    #[test]
    fn needs_and_stream_are_detected() {
        let body = br#"{"model":"m","stream":true,"tools":[{"type":"function"}],
            "response_format":{"type":"json_object"},
            "messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"u"}}]}]}"#;
        let req = inspect_json(body).unwrap();
        assert!(req.stream && req.needs.streaming && req.needs.tools);
        assert!(req.needs.vision && req.needs.json_mode);
        assert_eq!(
            req.needs.estimated_prompt_tokens,
            Some((body.len() / 4) as u32)
        );
        let plain = inspect_json(br#"{"model":"m","tools":[],"stream":false}"#).unwrap();
        assert!(!plain.stream && !plain.needs.tools && !plain.needs.vision);
    }

    #[test]
    fn session_key_precedence_follows_the_spec() {
        let key = |b: &[u8]| inspect_json(b).unwrap().body_session(b);
        assert_eq!(
            key(br#"{"model":"m","session_id":"s","prompt_cache_key":"p"}"#),
            Some("p".into())
        );
        assert_eq!(
            key(br#"{"model":"m","conversation_id":"c","metadata":{"user_id":"u"}}"#),
            Some("u".into())
        );
        assert_eq!(
            key(br#"{"model":"m","conversation_id":"c"}"#),
            Some("c".into())
        );
        let a = key(br#"{"model":"m","messages":[{"role":"system","content":"x"},{"role":"user","content":"hello"}]}"#);
        let b = key(br#"{"model":"m","messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"y"}]}"#);
        assert!(a.is_some());
        assert_eq!(a, b);
        assert_eq!(key(br#"{"model":"m"}"#), None);
        let long = vec![b'a'; 300];
        assert!(header_session_key(&long).is_some_and(|k| k.starts_with("sha256:")));
        assert_eq!(header_session_key(b"abc"), Some("abc".into()));
    }

    #[test]
    fn malformed_and_missing_model_are_distinguished() {
        assert!(matches!(
            inspect_json(b"{not json"),
            Err(InspectError::Malformed(_))
        ));
        assert!(matches!(
            inspect_json(b"[1,2]"),
            Err(InspectError::Malformed(_))
        ));
        assert_eq!(inspect_json(b"{}"), Err(InspectError::MissingModel));
        assert!(matches!(
            inspect_json(br#"{"model":3}"#),
            Err(InspectError::Malformed(_))
        ));
    }

    #[test]
    fn a_huge_boundary_is_refused_and_near_miss_bodies_are_scanned_once() {
        let long = "b".repeat(60 * 1024);
        let body = vec![b'x'; 8 * 1024 * 1024];
        let started = std::time::Instant::now();
        let e = inspect_multipart(&body, &format!("multipart/form-data; boundary={long}"));
        assert!(matches!(e, Err(InspectError::Malformed(m)) if m.contains("boundary")));
        // The longest legal boundary over 8 MB of near-misses: one linear pass.
        let boundary = "a".repeat(70);
        let mut body = Vec::new();
        while body.len() < 8 * 1024 * 1024 {
            body.extend_from_slice(b"--");
            body.extend_from_slice(&boundary.as_bytes()[..69]);
            body.push(b'!');
        }
        let e = inspect_multipart(&body, &format!("multipart/form-data; boundary={boundary}"));
        assert_eq!(e, Err(InspectError::MissingModel));
        // Reported, not asserted (timings stay out of pass/fail); the quadratic search this
        // replaced took ~10 s here, the linear one takes milliseconds.
        eprintln!("8 MiB multipart scans took {:?}", started.elapsed());
    }

    #[test]
    fn an_oversized_or_control_character_model_is_refused() {
        let long = format!(r#"{{"model":"{}"}}"#, "m".repeat(MAX_MODEL_LEN + 1));
        assert!(
            matches!(inspect_json(long.as_bytes()), Err(InspectError::Malformed(m)) if m.contains("longer"))
        );
        assert!(matches!(
            inspect_json(br#"{"model":"a\r\nb"}"#),
            Err(InspectError::Malformed(_))
        ));
        for len in [MAX_MODEL_LEN - 1, MAX_MODEL_LEN] {
            let ok = format!(r#"{{"model":"{}"}}"#, "m".repeat(len));
            assert!(inspect_json(ok.as_bytes()).is_ok(), "{len} bytes");
        }
    }

    #[test]
    fn a_path_model_is_checked_and_the_body_keeps_its_bytes() {
        let body = Bytes::from_static(br#"{"contents":[],"model":"ignored"}"#);
        let req = inspect_json_for(&body, Some(("gemini-pro", true))).unwrap();
        assert_eq!(req.model, "gemini-pro");
        assert!(req.stream && req.needs.streaming);
        // Nothing in the body to rewrite: the model is the path's.
        assert_eq!(req.rewrite(&body, "other"), body);
        assert!(!inspect_json_for(&body, Some(("g", false))).unwrap().stream);
        assert_eq!(
            inspect_json_for(&body, Some((" ", false))),
            Err(InspectError::MissingModel)
        );
        assert!(matches!(
            inspect_json_for(&body, Some(("a\nb", false))),
            Err(InspectError::Malformed(_))
        ));
        assert_eq!(
            inspect_json(br#"{"model":"  "}"#),
            Err(InspectError::MissingModel)
        );
        assert!(matches!(
            inspect_json(b"  "),
            Err(InspectError::Malformed(m)) if m.contains("JSON object")
        ));
    }

    #[test]
    fn tools_functions_json_schema_and_image_kinds_are_needs() {
        let needs = |b: &str| inspect_json(b.as_bytes()).unwrap().needs;
        assert!(needs(r#"{"model":"m","functions":[{"name":"f"}]}"#).tools);
        assert!(!needs(r#"{"model":"m","functions":[]}"#).tools);
        assert!(!needs(r#"{"model":"m","tools":null}"#).tools);
        assert!(needs(r#"{"model":"m","response_format":{"type":"json_schema"}}"#).json_mode);
        assert!(!needs(r#"{"model":"m","response_format":{"type":"text"}}"#).json_mode);
        for kind in ["image_url", "input_image", "image"] {
            let body = format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":[{{"type":"{kind}"}}]}}]}}"#
            );
            assert!(needs(&body).vision, "{kind}");
        }
        assert!(
            !needs(r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]}"#)
                .vision
        );
        // A Responses input list is a conversation too; an input string is not.
        assert!(
            needs(r#"{"model":"m","input":[{"role":"user","content":[{"type":"input_image"}]}]}"#)
                .vision
        );
        assert!(!needs(r#"{"model":"m","input":"[image]"}"#).vision);
        // One image anywhere is enough: a later list without one does not take it back.
        assert!(
            needs(
                r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]},
                {"role":"assistant","content":[{"type":"text"}]}]}"#
            )
            .vision
        );
        assert!(!needs(r#"{"model":"m","stream":false}"#).streaming);
    }

    #[test]
    fn background_and_embedding_inputs_are_read() {
        let read = |b: &str| inspect_json(b.as_bytes()).unwrap();
        assert!(read(r#"{"model":"m","background":true}"#).background);
        assert!(!read(r#"{"model":"m","background":false}"#).background);
        assert!(!read(r#"{"model":"m"}"#).background);
        assert_eq!(read(r#"{"model":"m","input":["a","b","c"]}"#).inputs, 3);
        assert_eq!(read(r#"{"model":"m","input":[[1,2],[3]]}"#).inputs, 2);
        // A single token list is one input.
        assert_eq!(read(r#"{"model":"m","input":[1,2,3]}"#).inputs, 1);
        assert_eq!(read(r#"{"model":"m","input":"one"}"#).inputs, 1);
        assert_eq!(read(r#"{"model":"m","input":[]}"#).inputs, 1);
        assert_eq!(read(r#"{"model":"m"}"#).inputs, 1);
    }

    #[test]
    fn session_fields_may_be_numbers_and_empty_ones_do_not_count() {
        let key = |b: &[u8]| inspect_json(b).unwrap().body_session(b);
        assert_eq!(
            key(br#"{"model":"m","session_id":42}"#),
            Some("42".to_owned())
        );
        assert_eq!(
            key(br#"{"model":"m","prompt_cache_key":"","session_id":"s"}"#),
            Some("s".to_owned())
        );
        assert_eq!(
            key(br#"{"model":"m","prompt_cache_key":null,"metadata":{"user_id":7}}"#),
            Some("7".to_owned())
        );
        // The first user message's content, hashed.
        let body = br#"{"model":"m","messages":[{"role":"assistant","content":"a"},{"role":"user","content":"hello"},{"role":"user","content":"later"}]}"#;
        assert_eq!(
            key(body),
            Some(format!("msg:{}", sha256_hex(br#""hello""#)))
        );
        let exactly = vec![b'a'; 256];
        assert_eq!(header_session_key(&exactly), Some("a".repeat(256)));
        assert_eq!(header_session_key(b""), None);
        let long = vec![b'a'; 257];
        assert_eq!(
            header_session_key(&long),
            Some(format!("sha256:{}", sha256_hex(&long)))
        );
    }

    #[test]
    fn multipart_reads_stream_quoted_boundaries_and_refuses_a_missing_one() {
        let body = Bytes::from_static(
            b"--a b\r\nContent-Disposition: form-data; name=\"stream\"\r\n\r\ntrue\r\n--a b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n whisper \r\n--a b--\r\n",
        );
        let req = inspect_multipart(&body, "multipart/form-data; boundary=\"a b\"").unwrap();
        assert_eq!(req.model, "whisper");
        assert!(req.stream && req.needs.streaming);
        assert_eq!(req.inputs, 1);
        let not_stream = Bytes::from_static(
            b"--x\r\nContent-Disposition: form-data; name=\"stream\"\r\n\r\nfalse\r\n--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nw\r\n--x--\r\n",
        );
        let req = inspect_multipart(&not_stream, "multipart/form-data; boundary=x").unwrap();
        assert!(!req.stream);
        for content_type in ["multipart/form-data", "multipart/form-data; boundary=\"\""] {
            assert!(matches!(
                inspect_multipart(&body, content_type),
                Err(InspectError::Malformed(m)) if m.contains("boundary")
            ));
        }
        // The longest legal boundary and one shorter are read; one longer is refused.
        for len in [MAX_BOUNDARY - 1, MAX_BOUNDARY] {
            let boundary = "b".repeat(len);
            assert_eq!(
                inspect_multipart(b"", &format!("multipart/form-data; boundary={boundary}")),
                Err(InspectError::MissingModel),
                "{len} characters"
            );
        }
        let over = "b".repeat(MAX_BOUNDARY + 1);
        assert!(matches!(
            inspect_multipart(b"", &format!("multipart/form-data; boundary={over}")),
            Err(InspectError::Malformed(m)) if m.contains("boundary")
        ));
        let control = Bytes::from_static(
            b"--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\na\x07b\r\n--x--\r\n",
        );
        assert!(matches!(
            inspect_multipart(&control, "multipart/form-data; boundary=x"),
            Err(InspectError::Malformed(_))
        ));
    }

    #[test]
    fn multipart_model_is_read_and_rewritten() {
        let body = Bytes::from_static(
            b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF....\r\n--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-alias\r\n--XyZ--\r\n",
        );
        let req = inspect_multipart(&body, "multipart/form-data; boundary=XyZ").unwrap();
        assert_eq!(req.model, "whisper-alias");
        let out = req.rewrite(&body, "whisper-1");
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.contains("name=\"model\"\r\n\r\nwhisper-1\r\n--XyZ--"),
            "{text}"
        );
        assert!(text.contains("RIFF...."));
    }

    #[test]
    fn a_parts_name_is_its_disposition_name_however_spelt() {
        let names = |h: &str| part_names(h);
        assert_eq!(
            names("Content-Disposition: form-data; name=\"model\""),
            ["model"]
        );
        assert_eq!(
            names("content-disposition: form-data; NAME=model"),
            ["model"]
        );
        assert_eq!(
            names("Content-Disposition: form-data; name*=UTF-8''mod%65l"),
            ["model"]
        );
        assert_eq!(
            names("Content-Disposition: form-data; name=\"a;\\\"b\"; filename=\"model\""),
            ["a;\"b"]
        );
        assert!(names("Content-Type: text/plain; name=model").is_empty());
        assert_eq!(
            names("Content-Disposition: form-data; name=file; name=model").len(),
            2
        );
    }

    #[test]
    fn multipart_refuses_a_field_it_routes_by_given_twice() {
        let form = |parts: &[(&str, &str)]| {
            let mut body = String::new();
            for (name, value) in parts {
                body.push_str(&format!(
                    "--b\r\nContent-Disposition: form-data; {name}\r\n\r\n{value}\r\n"
                ));
            }
            body.push_str("--b--\r\n");
            body.into_bytes()
        };
        let inspect = |parts: &[(&str, &str)]| {
            inspect_multipart(&form(parts), "multipart/form-data; boundary=b")
        };
        for parts in [
            &[("name=\"model\"", "a"), ("name=\"model\"", "b")][..],
            &[("name=\"model\"", "a"), ("name=model", "a")],
            &[("name=\"model\"; name=\"x\"", "a")],
        ] {
            assert_eq!(inspect(parts), Err(InspectError::DuplicateField("model")));
        }
        let streams = [
            ("name=\"model\"", "a"),
            ("name=stream", "true"),
            ("name=stream", "false"),
        ];
        assert_eq!(
            inspect(&streams),
            Err(InspectError::DuplicateField("stream"))
        );
        let one = inspect(&[
            ("name=\"file\"; filename=\"model\"", "x"),
            ("name=model", "a"),
        ]);
        assert_eq!(one.unwrap().model, "a");
    }

    #[test]
    fn multipart_skips_a_preamble_and_long_parts() {
        // RFC 2046 allows text before the first delimiter; a part's value may be longer than
        // everything before it.
        let file = "x".repeat(300);
        let body = Bytes::from(format!(
            "{}\r\n--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n{file}\r\n--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--b--\r\n",
            "This is the preamble. ".repeat(10)
        ));
        let req = inspect_multipart(&body, "multipart/form-data; boundary=b").unwrap();
        assert_eq!(req.model, "whisper");
        assert!(String::from_utf8_lossy(&req.rewrite(&body, "w-1"))
            .ends_with("name=\"model\"\r\n\r\nw-1\r\n--b--\r\n"));
    }
}
