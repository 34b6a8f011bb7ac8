//! AWS Bedrock's Converse API, spoken through Anthropic's Messages shape.
//!
//! A `bedrock` channel is planned like an Anthropic one (its requests, answers, streams and
//! errors are Anthropic Messages to the rest of the gateway, so every client protocol reaches it
//! through the existing translations); this module converts at the wire:
//!
//! - requests: an Anthropic Messages body to a `Converse` body ([`converse_request`]) or a
//!   `CountTokens` one ([`count_tokens_request`]);
//! - answers: a `Converse` answer to an Anthropic message ([`anthropic_message`]), a
//!   `CountTokens` answer to Anthropic's count ([`anthropic_count`]);
//! - streams: `ConverseStream`'s event-stream messages ([`eventstream`]) to Anthropic's SSE
//!   events ([`StreamConverter`]); an exception message is Anthropic's `error` event;
//! - errors: Bedrock's `{"message": ...}` with its `x-amzn-ErrorType` header to Anthropic's
//!   error body ([`anthropic_error`]), the status kept.
//!
//! Not translated: image URLs (Bedrock takes bytes or S3 locations), `top_k` and other
//! model-specific fields, thinking blocks (dropped from requests; reasoning deltas are not
//! streamed back), `tool_choice: none` (sent as the default, auto).

pub mod eventstream;

use serde_json::{json, Map, Value};

use crate::error::{malformed, TranslateError};
use crate::util::get_str;

/// The converse body for an Anthropic Messages `body`, and whether the client asked for a
/// stream (`ConverseStream`).
pub fn converse_request(body: &[u8]) -> Result<(Vec<u8>, bool), TranslateError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| malformed("not JSON"))?;
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let mut out = conversation(&v)?;
    let mut inference = Map::new();
    if let Some(n) = v.get("max_tokens").and_then(Value::as_u64) {
        inference.insert("maxTokens".into(), json!(n));
    }
    for (from, to) in [("temperature", "temperature"), ("top_p", "topP")] {
        if let Some(x) = v.get(from).filter(|x| x.is_number()) {
            inference.insert(to.into(), x.clone());
        }
    }
    if let Some(stops) = v.get("stop_sequences").filter(|s| s.is_array()) {
        inference.insert("stopSequences".into(), stops.clone());
    }
    if !inference.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(inference));
    }
    Ok((Value::Object(out).to_string().into_bytes(), stream))
}

/// The `CountTokens` body for an Anthropic `count_tokens` body.
pub fn count_tokens_request(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| malformed("not JSON"))?;
    let converse = conversation(&v)?;
    Ok(json!({"input": {"converse": converse}})
        .to_string()
        .into_bytes())
}

/// `messages`, `system` and `toolConfig` of a Converse body.
fn conversation(v: &Value) -> Result<Map<String, Value>, TranslateError> {
    let mut out = Map::new();
    let messages = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("no messages"))?;
    let mut converted = Vec::with_capacity(messages.len());
    for m in messages {
        let role = match get_str(m, "role") {
            Some("assistant") => "assistant",
            _ => "user",
        };
        let content = content_blocks(m.get("content").unwrap_or(&Value::Null))?;
        converted.push(json!({"role": role, "content": content}));
    }
    out.insert("messages".into(), Value::Array(converted));
    match v.get("system") {
        Some(Value::String(s)) if !s.is_empty() => {
            out.insert("system".into(), json!([{"text": s}]));
        }
        Some(Value::Array(blocks)) => {
            let texts: Vec<Value> = blocks
                .iter()
                .filter_map(|b| get_str(b, "text"))
                .map(|t| json!({"text": t}))
                .collect();
            if !texts.is_empty() {
                out.insert("system".into(), Value::Array(texts));
            }
        }
        _ => {}
    }
    if let Some(tools) = v.get("tools").and_then(Value::as_array) {
        let specs: Vec<Value> = tools
            .iter()
            .filter_map(|t| {
                let name = get_str(t, "name")?;
                let mut spec = json!({
                    "name": name,
                    "inputSchema": {"json": t.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"}))},
                });
                if let Some(d) = get_str(t, "description") {
                    spec["description"] = json!(d);
                }
                Some(json!({"toolSpec": spec}))
            })
            .collect();
        if !specs.is_empty() {
            let mut config = json!({"tools": specs});
            match v.get("tool_choice").and_then(|c| get_str(c, "type")) {
                Some("any") => config["toolChoice"] = json!({"any": {}}),
                Some("tool") => {
                    if let Some(name) = v.get("tool_choice").and_then(|c| get_str(c, "name")) {
                        config["toolChoice"] = json!({"tool": {"name": name}});
                    }
                }
                Some("auto") => config["toolChoice"] = json!({"auto": {}}),
                _ => {}
            }
            out.insert("toolConfig".into(), config);
        }
    }
    Ok(out)
}

/// Bedrock's image formats, from a MIME type.
fn image_format(mime: &str) -> Option<&'static str> {
    match mime.to_ascii_lowercase().as_str() {
        "image/png" => Some("png"),
        "image/jpeg" | "image/jpg" => Some("jpeg"),
        "image/gif" => Some("gif"),
        "image/webp" => Some("webp"),
        _ => None,
    }
}

fn media_block(b: &Value, key: &str) -> Result<Value, TranslateError> {
    let source = b.get("source").unwrap_or(&Value::Null);
    if get_str(source, "type") != Some("base64") {
        return Err(TranslateError::Unsupported(format!(
            "{key} sources other than base64 data"
        )));
    }
    let data = get_str(source, "data").unwrap_or("");
    let mime = get_str(source, "media_type").unwrap_or("");
    if key == "image" {
        let format = image_format(mime)
            .ok_or_else(|| TranslateError::Unsupported("this image type".into()))?;
        Ok(json!({"image": {"format": format, "source": {"bytes": data}}}))
    } else {
        if mime != "application/pdf" {
            return Err(TranslateError::Unsupported(
                "documents other than PDF".into(),
            ));
        }
        Ok(json!({"document": {"format": "pdf", "name": "document", "source": {"bytes": data}}}))
    }
}

fn content_blocks(content: &Value) -> Result<Vec<Value>, TranslateError> {
    let blocks = match content {
        Value::String(s) => return Ok(vec![json!({"text": s})]),
        Value::Array(blocks) => blocks,
        _ => return Ok(Vec::new()),
    };
    let mut out = Vec::with_capacity(blocks.len());
    for b in blocks {
        match get_str(b, "type") {
            Some("text") => {
                let text = get_str(b, "text").unwrap_or("");
                if !text.is_empty() {
                    out.push(json!({"text": text}));
                }
            }
            Some("image") => out.push(media_block(b, "image")?),
            Some("document") => out.push(media_block(b, "document")?),
            Some("tool_use") => out.push(json!({"toolUse": {
                "toolUseId": get_str(b, "id").unwrap_or(""),
                "name": get_str(b, "name").unwrap_or(""),
                "input": b.get("input").cloned().unwrap_or_else(|| json!({})),
            }})),
            Some("tool_result") => {
                let content = match b.get("content") {
                    Some(Value::String(s)) => vec![json!({"text": s})],
                    Some(Value::Array(parts)) => {
                        let mut c = Vec::new();
                        for p in parts {
                            match get_str(p, "type") {
                                Some("text") => {
                                    c.push(json!({"text": get_str(p, "text").unwrap_or("")}))
                                }
                                Some("image") => c.push(media_block(p, "image")?),
                                _ => {}
                            }
                        }
                        c
                    }
                    _ => Vec::new(),
                };
                let mut result = json!({
                    "toolUseId": get_str(b, "tool_use_id").unwrap_or(""),
                    "content": if content.is_empty() { vec![json!({"text": ""})] } else { content },
                });
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    result["status"] = json!("error");
                }
                out.push(json!({"toolResult": result}));
            }
            // Thinking and other blocks have no Converse equivalent here.
            _ => {}
        }
    }
    Ok(out)
}

/// Anthropic's stop reason for Bedrock's.
pub fn stop_reason(bedrock: &str) -> &'static str {
    match bedrock {
        "tool_use" => "tool_use",
        "max_tokens" => "max_tokens",
        "stop_sequence" => "stop_sequence",
        "guardrail_intervened" | "content_filtered" => "refusal",
        "model_context_window_exceeded" => "model_context_window_exceeded",
        _ => "end_turn",
    }
}

/// Anthropic's usage object for Bedrock's (`inputTokens` excludes cache reads and writes, as
/// Anthropic's `input_tokens` does).
fn usage(u: Option<&Value>) -> Value {
    let n = |k: &str| {
        u.and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let mut out = json!({
        "input_tokens": n("inputTokens"),
        "output_tokens": n("outputTokens"),
    });
    if let Some(u) = u {
        if let Some(c) = u.get("cacheReadInputTokens").and_then(Value::as_u64) {
            out["cache_read_input_tokens"] = json!(c);
        }
        if let Some(c) = u.get("cacheWriteInputTokens").and_then(Value::as_u64) {
            out["cache_creation_input_tokens"] = json!(c);
        }
    }
    out
}

/// An Anthropic message id from Bedrock's request id (`x-amzn-RequestId`): letters, digits and
/// `-` kept, at most 64 of them.
pub fn message_id(request_id: &str) -> String {
    let kept: String = request_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    format!("msg_bdrk_{kept}")
}

/// The Anthropic message for a `Converse` answer.
pub fn anthropic_message(body: &[u8], model: &str, id: &str) -> Result<Vec<u8>, TranslateError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| malformed("not JSON"))?;
    let message = v
        .get("output")
        .and_then(|o| o.get("message"))
        .ok_or_else(|| malformed("no output.message"))?;
    let mut content = Vec::new();
    for b in message
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        if let Some(t) = get_str(b, "text") {
            content.push(json!({"type": "text", "text": t}));
        } else if let Some(t) = b.get("toolUse") {
            content.push(json!({
                "type": "tool_use",
                "id": get_str(t, "toolUseId").unwrap_or(""),
                "name": get_str(t, "name").unwrap_or(""),
                "input": t.get("input").cloned().unwrap_or_else(|| json!({})),
            }));
        }
    }
    Ok(json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(get_str(&v, "stopReason").unwrap_or("end_turn")),
        "stop_sequence": null,
        "usage": usage(v.get("usage")),
    })
    .to_string()
    .into_bytes())
}

/// Anthropic's count for a `CountTokens` answer (`{"inputTokens": N}`).
pub fn anthropic_count(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| malformed("not JSON"))?;
    let n = v
        .get("inputTokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("no inputTokens"))?;
    Ok(json!({"input_tokens": n}).to_string().into_bytes())
}

/// The exception name of an `x-amzn-ErrorType` header value
/// (`ThrottlingException:http://internal.amazon.com/...` → `ThrottlingException`).
pub fn error_type(header: &str) -> &str {
    header.split(':').next().unwrap_or(header).trim()
}

/// Anthropic's error type for a status.
fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// Anthropic's error body for a Bedrock error answer: `status`, the exception name (from
/// `x-amzn-ErrorType` or the body's `__type`) and the body's `message` (or `Message`), quoted
/// at most 1,000 characters.
pub fn anthropic_error(status: u16, exception: Option<&str>, body: &[u8]) -> Vec<u8> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let exception = exception
        .map(error_type)
        .or_else(|| get_str(&v, "__type").map(|t| t.rsplit('#').next().unwrap_or(t)))
        .filter(|e| !e.is_empty());
    let text = get_str(&v, "message")
        .or_else(|| get_str(&v, "Message"))
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(1000).collect());
    let text: String = text.chars().take(1000).collect();
    let message = match exception {
        Some(e) if text.is_empty() => e.to_owned(),
        Some(e) => format!("{e}: {text}"),
        None => text,
    };
    json!({"type": "error", "error": {"type": anthropic_error_type(status), "message": message}})
        .to_string()
        .into_bytes()
}

/// The status Bedrock answers an exception with (for exceptions inside a stream, which carry
/// none).
/// A stream's `:exception-type` is in lower camel case (`throttlingException`); both spellings
/// are read.
pub fn exception_status(exception: &str) -> u16 {
    match exception.to_ascii_lowercase().as_str() {
        "throttlingexception" | "modelnotreadyexception" => 429,
        "validationexception" => 400,
        "accessdeniedexception" | "unrecognizedclientexception" | "invalidsignatureexception" => {
            403
        }
        "resourcenotfoundexception" => 404,
        "modeltimeoutexception" => 408,
        "serviceunavailableexception" => 503,
        "modelstreamerrorexception" | "modelerrorexception" => 424,
        _ => 500,
    }
}

/// `ConverseStream`'s event stream, converted to Anthropic's SSE events as its bytes arrive.
///
/// Bedrock reports usage in its last event (`metadata`), after `messageStop`: Anthropic's
/// `message_delta` (stop reason and usage) and `message_stop` are written when it arrives, or
/// at [`StreamConverter::finish`] without usage when the stream ends without it.
#[derive(Debug)]
pub struct StreamConverter {
    decoder: eventstream::Decoder,
    id: String,
    model: String,
    started: bool,
    /// Bedrock block indexes already opened (their Anthropic index is their position).
    blocks: Vec<(u64, bool)>,
    stop: Option<String>,
    done: bool,
}

fn sse(out: &mut Vec<u8>, event: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

impl StreamConverter {
    pub fn new(model: &str, id: &str) -> StreamConverter {
        StreamConverter {
            decoder: eventstream::Decoder::new(),
            id: id.to_owned(),
            model: model.to_owned(),
            started: false,
            blocks: Vec::new(),
            stop: None,
            done: false,
        }
    }

    /// Whether the stream ended (`metadata` after `messageStop`, or an exception).
    pub fn done(&self) -> bool {
        self.done
    }

    /// Converts the messages `bytes` completes, appending Anthropic SSE events to `out`; on a
    /// framing error, the messages complete before it are still converted, and bytes after the
    /// stream's end are never read (however the bytes were split, the outcome is the same).
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), eventstream::FrameError> {
        let mut messages = Vec::new();
        let decoded = self.decoder.push(bytes, &mut messages);
        for message in &messages {
            if self.done {
                break;
            }
            self.message(message, out);
        }
        if self.done {
            return Ok(());
        }
        decoded
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        sse(
            out,
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }}),
        );
    }

    /// The Anthropic index of Bedrock block `index`, opening it (as `block`) if needed.
    fn open(&mut self, index: u64, block: Value, tool: bool, out: &mut Vec<u8>) -> usize {
        if let Some(at) = self.blocks.iter().position(|(i, _)| *i == index) {
            return at;
        }
        self.blocks.push((index, tool));
        let at = self.blocks.len() - 1;
        sse(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": at, "content_block": block}),
        );
        at
    }

    fn message(&mut self, m: &eventstream::Message, out: &mut Vec<u8>) {
        let payload: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
        let kind = m.header(":message-type").unwrap_or("event");
        if kind != "event" {
            self.exception(m, out);
            return;
        }
        let index = payload
            .get("contentBlockIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        match m.header(":event-type").unwrap_or("") {
            "messageStart" => self.start(out),
            "contentBlockStart" => {
                self.start(out);
                if let Some(t) = payload.get("start").and_then(|s| s.get("toolUse")) {
                    let block = json!({
                        "type": "tool_use",
                        "id": get_str(t, "toolUseId").unwrap_or(""),
                        "name": get_str(t, "name").unwrap_or(""),
                        "input": {},
                    });
                    self.open(index, block, true, out);
                }
            }
            "contentBlockDelta" => {
                self.start(out);
                let delta = payload.get("delta").unwrap_or(&Value::Null);
                self.block_delta(index, delta, out);
            }
            "contentBlockStop" => {
                if let Some(at) = self.blocks.iter().position(|(i, _)| *i == index) {
                    sse(
                        out,
                        "content_block_stop",
                        &json!({"type": "content_block_stop", "index": at}),
                    );
                }
            }
            "messageStop" => {
                self.start(out);
                self.stop = Some(
                    get_str(&payload, "stopReason")
                        .unwrap_or("end_turn")
                        .to_owned(),
                );
            }
            "metadata" => {
                self.start(out);
                self.end(payload.get("usage"), out);
            }
            _ => {}
        }
    }

    /// An exception (or error) message: an Anthropic error event, and the stream is done.
    fn exception(&mut self, m: &eventstream::Message, out: &mut Vec<u8>) {
        let exception = m
            .header(":exception-type")
            .or_else(|| m.header(":error-code"))
            .unwrap_or("InternalServerException");
        let status = exception_status(exception);
        let body = anthropic_error(status, Some(exception), &m.payload);
        self.start(out);
        let error: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        sse(out, "error", &error);
        self.done = true;
    }

    /// `contentBlockDelta`: text opens a text block when no block is open at that index; tool input
    /// goes only to a block that started as a tool call.
    fn block_delta(&mut self, index: u64, delta: &Value, out: &mut Vec<u8>) {
        if let Some(text) = get_str(delta, "text") {
            let at = self.open(index, json!({"type": "text", "text": ""}), false, out);
            sse(
                out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": at,
                        "delta": {"type": "text_delta", "text": text}}),
            );
        } else if let Some(input) = delta.get("toolUse").and_then(|t| get_str(t, "input")) {
            if let Some(at) = self.blocks.iter().position(|(i, t)| *i == index && *t) {
                sse(
                    out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": at,
                            "delta": {"type": "input_json_delta", "partial_json": input}}),
                );
            }
        }
    }

    fn end(&mut self, usage_of: Option<&Value>, out: &mut Vec<u8>) {
        let reason = stop_reason(self.stop.as_deref().unwrap_or("end_turn"));
        sse(
            out,
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": null},
                    "usage": usage(usage_of)}),
        );
        sse(out, "message_stop", &json!({"type": "message_stop"}));
        self.done = true;
    }

    /// At the end of the upstream body: the closing events if `messageStop` came without
    /// `metadata`. `Err` when the stream stopped early (no `messageStop`, or a partial message).
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), eventstream::FrameError> {
        if self.done {
            return Ok(());
        }
        if self.stop.is_some() && self.decoder.pending() == 0 {
            self.end(None, out);
            return Ok(());
        }
        Err(eventstream::FrameError::Truncated)
    }
}

#[cfg(test)]
mod tests;
