//! OpenAI Chat Completions: request parse/render, response parse/render.

use serde_json::{json, Map, Value};

use super::ir::{
    joined_text, parse_data_url, Choice, Ctx, Finish, Ir, Media, MediaKind, Msg, Part, Resp,
    ResponseFormat, Role, Source, Tool, ToolChoice, ANTHROPIC, GEMINI,
};
use crate::error::{malformed, TranslateError};
use crate::usage::FullUsage;
use crate::util::{get_array, get_f64, get_str, get_u64, value_text};

const OTHERS: &[crate::protocol::Protocol] = &[ANTHROPIC, GEMINI];

pub(crate) fn parse_request(body: &Map<String, Value>, ir: &mut Ir) -> Result<(), TranslateError> {
    let messages =
        get_array(body, "messages").ok_or_else(|| malformed("`messages` must be an array"))?;
    for (i, m) in messages.iter().enumerate() {
        parse_message(m, i, ir)?;
    }
    if let Some(tools) = get_array(body, "tools") {
        parse_tools(tools, ir)?;
    }
    if body.get("functions").is_some_and(|f| !f.is_null()) {
        ir.block("legacy functions", OTHERS, true);
    }
    parse_tool_choice(body.get("tool_choice"), ir)?;
    ir.parallel_tool_calls = body.get("parallel_tool_calls").and_then(Value::as_bool);
    parse_sampling(body, ir);
    block_output_kinds(body, ir);
    if let Some(rf) = body.get("response_format").filter(|r| !r.is_null()) {
        parse_response_format(rf, ir)?;
    }
    ir.user = get_str(body, "user").map(str::to_string);
    Ok(())
}

/// `messages[i]`: system and developer messages join the system prompt; tool messages are tool
/// results in a user turn.
fn parse_message(m: &Value, i: usize, ir: &mut Ir) -> Result<(), TranslateError> {
    let role =
        get_str(m, "role").ok_or_else(|| malformed(format!("messages[{i}].role missing")))?;
    let content = m.get("content").unwrap_or(&Value::Null);
    match role {
        "system" | "developer" => {
            let parts = parse_content(content, ir, Ctx::User)?;
            ir.push_system(&parts, "non-text system content", OTHERS);
        }
        "user" => {
            let parts = parse_content(content, ir, Ctx::User)?;
            ir.push_user(parts);
        }
        "assistant" => {
            let parts = assistant_parts(m, content, ir)?;
            ir.messages.push(Msg {
                role: Role::Assistant,
                parts,
            });
        }
        "tool" => {
            let id = get_str(m, "tool_call_id")
                .ok_or_else(|| malformed(format!("messages[{i}].tool_call_id missing")))?;
            let content = parse_content(content, ir, Ctx::ToolResult)?;
            ir.messages.push(Msg {
                role: Role::User,
                parts: vec![Part::ToolResult {
                    id: id.into(),
                    name: None,
                    content,
                    is_error: false,
                }],
            });
        }
        "function" => ir.block("legacy function messages", OTHERS, true),
        other => return Err(malformed(format!("unknown role `{other}`"))),
    }
    Ok(())
}

/// An assistant message's parts: its content (or its refusal when it has none), then its tool
/// calls.
fn assistant_parts(m: &Value, content: &Value, ir: &mut Ir) -> Result<Vec<Part>, TranslateError> {
    let mut parts = parse_content(content, ir, Ctx::Assistant)?;
    if let Some(r) = get_str(m, "refusal") {
        if parts.is_empty() {
            parts.push(Part::Text(r.to_string()));
        }
    }
    for c in get_array(m, "tool_calls").into_iter().flatten() {
        let id = get_str(c, "id").ok_or_else(|| malformed("tool_calls[].id missing"))?;
        let f = c
            .get("function")
            .ok_or_else(|| malformed("tool_calls[].function missing"))?;
        let name =
            get_str(f, "name").ok_or_else(|| malformed("tool_calls[].function.name missing"))?;
        let args = f
            .get("arguments")
            .map(value_text)
            .unwrap_or_else(|| "{}".into());
        parts.push(Part::ToolCall {
            id: id.into(),
            name: name.into(),
            args,
        });
    }
    if m.get("function_call").is_some_and(|f| !f.is_null()) {
        ir.block("legacy function_call", OTHERS, true);
    }
    if m.get("audio").is_some_and(|a| !a.is_null()) {
        ir.block("assistant audio in history", OTHERS, true);
    }
    Ok(parts)
}

/// `tools[]`: function tools (the type may be left out); other tool types are blocked.
fn parse_tools(tools: &[Value], ir: &mut Ir) -> Result<(), TranslateError> {
    for t in tools {
        match get_str(t, "type") {
            Some("function") | None => {
                let f = t
                    .get("function")
                    .ok_or_else(|| malformed("tools[].function missing"))?;
                let name =
                    get_str(f, "name").ok_or_else(|| malformed("tools[].function.name missing"))?;
                ir.tools.push(Tool {
                    name: name.into(),
                    description: get_str(f, "description").map(str::to_string),
                    schema: f.get("parameters").filter(|p| !p.is_null()).cloned(),
                });
            }
            Some(other) => ir.block(format!("tool type {other}"), OTHERS, true),
        }
    }
    Ok(())
}

/// `tool_choice`: a mode string, or `{"type": "function", "function": {"name"}}`.
fn parse_tool_choice(tc: Option<&Value>, ir: &mut Ir) -> Result<(), TranslateError> {
    match tc {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => ir.tool_choice = Some(tool_choice_mode(s)?),
        Some(tc) => match get_str(tc, "type") {
            Some("function") => {
                let name = tc
                    .get("function")
                    .and_then(|f| get_str(f, "name"))
                    .ok_or_else(|| malformed("tool_choice.function.name missing"))?;
                ir.tool_choice = Some(ToolChoice::Named(name.into()));
            }
            other => ir.block(
                format!("tool_choice type {}", other.unwrap_or("?")),
                OTHERS,
                false,
            ),
        },
    }
    Ok(())
}

/// A `tool_choice` mode string (Chat Completions and the Responses API share them).
pub(crate) fn tool_choice_mode(mode: &str) -> Result<ToolChoice, TranslateError> {
    match mode {
        "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "required" => Ok(ToolChoice::Required),
        other => Err(malformed(format!("unknown tool_choice `{other}`"))),
    }
}

/// Token limit, sampling, stop sequences, choice count, seed and penalties.
fn parse_sampling(body: &Map<String, Value>, ir: &mut Ir) {
    ir.max_tokens = get_u64(body, "max_completion_tokens").or_else(|| get_u64(body, "max_tokens"));
    ir.temperature = get_f64(body, "temperature");
    ir.top_p = get_f64(body, "top_p");
    ir.top_k = get_u64(body, "top_k");
    match body.get("stop") {
        Some(Value::String(s)) => ir.stop.push(s.clone()),
        Some(Value::Array(a)) => ir
            .stop
            .extend(a.iter().filter_map(Value::as_str).map(str::to_string)),
        _ => {}
    }
    if let Some(n) = get_u64(body, "n") {
        ir.n = Some(n);
        if n > 1 {
            ir.block("n > 1", &[ANTHROPIC], false);
        }
    }
    ir.seed = body.get("seed").and_then(Value::as_i64);
    // A zero penalty is no penalty.
    ir.presence_penalty = get_f64(body, "presence_penalty").filter(|p| *p != 0.0);
    ir.frequency_penalty = get_f64(body, "frequency_penalty").filter(|p| *p != 0.0);
    if ir.presence_penalty.is_some() {
        ir.block("presence_penalty", &[ANTHROPIC], false);
    }
    if ir.frequency_penalty.is_some() {
        ir.block("frequency_penalty", &[ANTHROPIC], false);
    }
}

/// Outputs only OpenAI gives: logprobs, logit bias, audio, web search.
fn block_output_kinds(body: &Map<String, Value>, ir: &mut Ir) {
    if body.get("logprobs").and_then(Value::as_bool) == Some(true)
        || get_u64(body, "top_logprobs").is_some()
    {
        ir.block("logprobs", OTHERS, false);
    }
    if body
        .get("logit_bias")
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty())
    {
        ir.block("logit_bias", OTHERS, false);
    }
    let audio_out = body.get("audio").is_some_and(|a| !a.is_null())
        || get_array(body, "modalities")
            .is_some_and(|m| m.iter().any(|x| x.as_str() == Some("audio")));
    if audio_out {
        ir.block("audio output", OTHERS, false);
    }
    if body.get("web_search_options").is_some_and(|w| !w.is_null()) {
        ir.block("web_search_options", OTHERS, false);
    }
}

/// `response_format`: text, JSON mode or a JSON schema (named `response` when unnamed).
fn parse_response_format(rf: &Value, ir: &mut Ir) -> Result<(), TranslateError> {
    match get_str(rf, "type") {
        Some("text") => {}
        Some("json_object") => {
            ir.response_format = Some(ResponseFormat::JsonObject);
            ir.block("response_format json_object", &[ANTHROPIC], false);
        }
        Some("json_schema") => {
            let js = rf
                .get("json_schema")
                .ok_or_else(|| malformed("response_format.json_schema missing"))?;
            ir.response_format = Some(ResponseFormat::JsonSchema {
                name: get_str(js, "name").unwrap_or("response").to_string(),
                schema: js.get("schema").cloned().unwrap_or_else(|| json!({})),
                strict: js.get("strict").and_then(Value::as_bool),
            });
            ir.block("response_format json_schema", &[ANTHROPIC], false);
        }
        other => ir.block(
            format!("response_format {}", other.unwrap_or("?")),
            OTHERS,
            false,
        ),
    }
    Ok(())
}

fn parse_content(c: &Value, ir: &mut Ir, ctx: Ctx) -> Result<Vec<Part>, TranslateError> {
    let items = match c {
        Value::Null => return Ok(vec![]),
        Value::String(s) => return Ok(vec![Part::Text(s.clone())]),
        Value::Array(items) => items,
        _ => return Err(malformed("content must be a string or an array of parts")),
    };
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        let ty = get_str(item, "type").ok_or_else(|| malformed("content part without type"))?;
        match ty {
            "text" | "input_text" => {
                let t = get_str(item, "text").ok_or_else(|| malformed("text part without text"))?;
                parts.push(Part::Text(t.into()));
            }
            "refusal" => parts.push(Part::Text(get_str(item, "refusal").unwrap_or("").into())),
            "image_url" => {
                let iu = item
                    .get("image_url")
                    .ok_or_else(|| malformed("image_url part without image_url"))?;
                let url = iu
                    .as_str()
                    .or_else(|| get_str(iu, "url"))
                    .ok_or_else(|| malformed("image_url.url missing"))?;
                let media = media_from_url(url, MediaKind::Image)?;
                ir.check_media(&media, ctx);
                parts.push(Part::Media(media));
            }
            "input_audio" => {
                let media = input_audio(item)?;
                ir.check_media(&media, ctx);
                parts.push(Part::Media(media));
            }
            "file" => {
                let f = item
                    .get("file")
                    .ok_or_else(|| malformed("file part without file"))?;
                match get_str(f, "file_data") {
                    Some(data) => {
                        let media = file_data(data);
                        ir.check_media(&media, ctx);
                        parts.push(Part::Media(media));
                    }
                    None => ir.block("file_id reference", OTHERS, true),
                }
            }
            other => ir.block(format!("content part type {other}"), OTHERS, true),
        }
    }
    Ok(parts)
}

/// `input_audio`: base64 audio; its format is the MIME subtype (`mp3` is `audio/mpeg`; `wav`
/// when left out).
fn input_audio(item: &Value) -> Result<Media, TranslateError> {
    let a = item
        .get("input_audio")
        .ok_or_else(|| malformed("input_audio part without input_audio"))?;
    let data = get_str(a, "data").ok_or_else(|| malformed("input_audio.data missing"))?;
    let mime = match get_str(a, "format").unwrap_or("wav") {
        "mp3" => "audio/mpeg".to_string(),
        f => format!("audio/{f}"),
    };
    Ok(Media {
        kind: MediaKind::Audio,
        mime: Some(mime),
        source: Source::Base64(data.into()),
    })
}

/// `file.file_data`: a base64 data URL, or bare base64 (a PDF).
fn file_data(data: &str) -> Media {
    match parse_data_url(data) {
        Some((mime, d)) => Media {
            kind: MediaKind::of_mime(&mime),
            mime: Some(mime),
            source: Source::Base64(d),
        },
        None => Media {
            kind: MediaKind::Document,
            mime: Some("application/pdf".into()),
            source: Source::Base64(data.into()),
        },
    }
}

pub(crate) fn media_from_url(url: &str, kind: MediaKind) -> Result<Media, TranslateError> {
    if url.starts_with("data:") {
        let (mime, data) =
            parse_data_url(url).ok_or_else(|| malformed("data URL is not base64"))?;
        let kind = if mime.is_empty() {
            kind
        } else {
            MediaKind::of_mime(&mime)
        };
        Ok(Media {
            kind,
            mime: Some(mime),
            source: Source::Base64(data),
        })
    } else {
        Ok(Media {
            kind,
            mime: None,
            source: Source::Url(url.into()),
        })
    }
}

fn content_value(parts: &[&Part]) -> Value {
    if let [Part::Text(t)] = parts {
        return json!(t);
    }
    let mut out = Vec::new();
    for p in parts {
        match p {
            Part::Text(t) => out.push(json!({"type": "text", "text": t})),
            Part::Media(m) => out.push(media_value(m)),
            Part::ToolCall { .. } | Part::ToolResult { .. } => {}
        }
    }
    Value::Array(out)
}

fn media_value(m: &Media) -> Value {
    match m.kind {
        MediaKind::Audio => {
            let mime = m.mime_or_guess();
            let format = if mime.contains("mpeg") || mime.contains("mp3") {
                "mp3"
            } else {
                "wav"
            };
            let data = match &m.source {
                Source::Base64(d) => d.clone(),
                Source::Url(u) => u.clone(),
            };
            json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})
        }
        MediaKind::Document | MediaKind::Other | MediaKind::Video => {
            json!({"type": "file", "file": {"file_data": m.url(), "filename": "document.pdf"}})
        }
        MediaKind::Image => json!({"type": "image_url", "image_url": {"url": m.url()}}),
    }
}

pub(crate) fn emit_request(ir: &Ir, model: &str, stream: bool) -> Value {
    let mut b = json!({"model": model, "messages": messages(ir)});
    if stream {
        b["stream"] = json!(true);
        b["stream_options"] = json!({"include_usage": true});
    }
    if let Some(n) = ir.max_tokens {
        b["max_completion_tokens"] = json!(n);
    }
    if let Some(t) = ir.temperature {
        b["temperature"] = json!(t);
    }
    if let Some(t) = ir.top_p {
        b["top_p"] = json!(t);
    }
    if !ir.stop.is_empty() {
        b["stop"] = json!(ir.stop);
    }
    if let Some(n) = ir.n.filter(|n| *n != 1) {
        b["n"] = json!(n);
    }
    if let Some(s) = ir.seed {
        b["seed"] = json!(s);
    }
    if let Some(p) = ir.presence_penalty {
        b["presence_penalty"] = json!(p);
    }
    if let Some(p) = ir.frequency_penalty {
        b["frequency_penalty"] = json!(p);
    }
    emit_tools(ir, &mut b);
    if let Some(rf) = &ir.response_format {
        b["response_format"] = response_format_value(rf);
    }
    if let Some(u) = &ir.user {
        b["user"] = json!(u);
    }
    b
}

/// `messages`: the system texts joined into one system message; each tool result its own tool
/// message (before the rest of its user turn); an assistant's content null when it only calls
/// tools.
fn messages(ir: &Ir) -> Vec<Value> {
    let mut msgs = Vec::new();
    if !ir.system.is_empty() {
        msgs.push(json!({"role": "system", "content": ir.system.join("\n\n")}));
    }
    for m in &ir.messages {
        match m.role {
            Role::User => {
                let mut rest = Vec::new();
                for p in &m.parts {
                    match p {
                        Part::ToolResult { id, content, .. } => msgs.push(json!({
                            "role": "tool", "tool_call_id": id, "content": joined_text(content),
                        })),
                        other => rest.push(other),
                    }
                }
                if !rest.is_empty() {
                    msgs.push(json!({"role": "user", "content": content_value(&rest)}));
                }
            }
            Role::Assistant => {
                let (text, calls) = text_and_tool_calls(&m.parts);
                let mut a = json!({"role": "assistant"});
                a["content"] = if text.is_empty() && !calls.is_empty() {
                    Value::Null
                } else {
                    json!(text)
                };
                if !calls.is_empty() {
                    a["tool_calls"] = Value::Array(calls);
                }
                msgs.push(a);
            }
        }
    }
    msgs
}

/// `tools`, `parallel_tool_calls` and `tool_choice`: none of them without tools.
fn emit_tools(ir: &Ir, b: &mut Value) {
    if ir.tools.is_empty() {
        return;
    }
    let tools: Vec<Value> = ir
        .tools
        .iter()
        .map(|t| {
            let mut f = json!({"name": t.name});
            if let Some(d) = &t.description {
                f["description"] = json!(d);
            }
            if let Some(s) = &t.schema {
                f["parameters"] = s.clone();
            }
            json!({"type": "function", "function": f})
        })
        .collect();
    b["tools"] = Value::Array(tools);
    if let Some(p) = ir.parallel_tool_calls {
        b["parallel_tool_calls"] = json!(p);
    }
    if let Some(tc) = &ir.tool_choice {
        b["tool_choice"] = match tc {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Named(n) => json!({"type": "function", "function": {"name": n}}),
        };
    }
}

fn response_format_value(rf: &ResponseFormat) -> Value {
    match rf {
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => {
            let mut js = json!({"name": name, "schema": schema});
            if let Some(s) = strict {
                js["strict"] = json!(s);
            }
            json!({"type": "json_schema", "json_schema": js})
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

pub(crate) fn parse_response(v: &Value) -> Result<Resp, TranslateError> {
    let choices = get_array(v, "choices").ok_or_else(|| malformed("response without choices"))?;
    let mut out = Vec::new();
    for c in choices {
        let msg = c
            .get("message")
            .ok_or_else(|| malformed("choice without message"))?;
        let mut parts = Vec::new();
        match msg.get("content") {
            Some(Value::String(s)) if !s.is_empty() => parts.push(Part::Text(s.clone())),
            Some(Value::Array(a)) => {
                for p in a {
                    if let Some(t) = get_str(p, "text") {
                        parts.push(Part::Text(t.into()));
                    }
                }
            }
            _ => {}
        }
        if parts.is_empty() {
            if let Some(r) = get_str(msg, "refusal") {
                parts.push(Part::Text(r.into()));
            }
        }
        for tc in get_array(msg, "tool_calls").into_iter().flatten() {
            let f = tc.get("function").unwrap_or(&Value::Null);
            parts.push(Part::ToolCall {
                id: get_str(tc, "id").unwrap_or("").into(),
                name: get_str(f, "name").unwrap_or("").into(),
                args: f
                    .get("arguments")
                    .map(value_text)
                    .unwrap_or_else(|| "{}".into()),
            });
        }
        out.push(Choice {
            parts,
            finish: get_str(c, "finish_reason").map(Finish::from_openai),
        });
    }
    Ok(Resp {
        id: get_str(v, "id").unwrap_or("").into(),
        choices: out,
        usage: v
            .get("usage")
            .map(FullUsage::from_openai)
            .unwrap_or_default(),
    })
}

pub(crate) fn emit_response(r: &Resp, model: &str) -> Value {
    let choices: Vec<Value> = r
        .choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (text, calls) = text_and_tool_calls(&c.parts);
            let mut msg = json!({"role": "assistant", "refusal": null});
            msg["content"] = if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) };
            let has_calls = !calls.is_empty();
            if has_calls {
                msg["tool_calls"] = Value::Array(calls);
            }
            let finish = c.finish.clone().unwrap_or(if has_calls { Finish::ToolCalls } else { Finish::Stop });
            json!({"index": i, "message": msg, "finish_reason": finish.to_openai(), "logprobs": null})
        })
        .collect();
    json!({
        "id": openai_id(&r.id),
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": choices,
        "usage": r.usage.to_openai(),
    })
}

pub(crate) fn openai_id(upstream: &str) -> String {
    if upstream.starts_with("chatcmpl-") {
        upstream.to_string()
    } else {
        format!("chatcmpl-{upstream}")
    }
}

/// An assistant turn's text (its text parts joined) and its tool calls in OpenAI's
/// `tool_calls` shape — shared by requests (history) and responses.
fn text_and_tool_calls(parts: &[Part]) -> (String, Vec<Value>) {
    let text = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let calls = parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { id, name, args } => Some(json!({
                "id": id, "type": "function", "function": {"name": name, "arguments": args},
            })),
            _ => None,
        })
        .collect();
    (text, calls)
}
