//! Anthropic Messages: request parse/render, response parse/render.

use serde_json::{json, Map, Value};

use super::ir::{
    args_object, joined_text, merged_turns, Choice, Ctx, Finish, Ir, Media, MediaKind, Msg, Part,
    Resp, Role, Source, Tool, ToolChoice, GEMINI, OPENAI,
};
use crate::error::{malformed, TranslateError};
use crate::usage::FullUsage;
use crate::util::{anthropic_tool_id, get_array, get_f64, get_str, get_u64, value_text};

const OTHERS: &[crate::protocol::Protocol] = &[OPENAI, GEMINI];

pub(crate) fn parse_request(body: &Map<String, Value>, ir: &mut Ir) -> Result<(), TranslateError> {
    parse_system(body.get("system"), ir)?;
    let messages =
        get_array(body, "messages").ok_or_else(|| malformed("`messages` must be an array"))?;
    for (i, m) in messages.iter().enumerate() {
        let role = match get_str(m, "role") {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            other => {
                return Err(malformed(format!(
                    "messages[{i}].role `{}`",
                    other.unwrap_or("missing")
                )))
            }
        };
        let ctx = if role == Role::User {
            Ctx::User
        } else {
            Ctx::Assistant
        };
        let parts = parse_blocks(m.get("content").unwrap_or(&Value::Null), ir, ctx)?;
        ir.messages.push(Msg { role, parts });
    }
    block_prefill(ir);
    if let Some(tools) = get_array(body, "tools") {
        parse_tools(tools, ir)?;
    }
    if let Some(tc) = body.get("tool_choice").filter(|t| !t.is_null()) {
        parse_tool_choice(tc, ir)?;
    }
    parse_sampling(body, ir);
    if let Some(th) = body.get("thinking").filter(|t| !t.is_null()) {
        parse_thinking(th, ir);
    }
    if let Some(u) = body.get("metadata").and_then(|m| get_str(m, "user_id")) {
        ir.user = Some(u.to_string());
    }
    for key in ["mcp_servers", "container"] {
        if body.get(key).is_some_and(|x| !x.is_null()) {
            ir.block(key, OTHERS, false);
        }
    }
    Ok(())
}

/// `system`: a string, or text blocks (each one system text).
fn parse_system(system: Option<&Value>, ir: &mut Ir) -> Result<(), TranslateError> {
    match system {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => ir.system.push(s.clone()),
        Some(Value::Array(blocks)) => {
            for b in blocks {
                match get_str(b, "type") {
                    Some("text") => ir.system.push(get_str(b, "text").unwrap_or("").into()),
                    other => {
                        return Err(malformed(format!(
                            "system block type {}",
                            other.unwrap_or("?")
                        )))
                    }
                }
            }
        }
        Some(_) => {
            return Err(malformed(
                "`system` must be a string or an array of text blocks",
            ))
        }
    }
    Ok(())
}

/// A conversation ending on an assistant message without tool calls asks the model to continue
/// that message (a prefill), which the others cannot do.
fn block_prefill(ir: &mut Ir) {
    if let Some(last) = ir.messages.last() {
        if last.role == Role::Assistant
            && !last
                .parts
                .iter()
                .any(|p| matches!(p, Part::ToolCall { .. }))
        {
            ir.block(
                "assistant prefill (last message from the assistant)",
                OTHERS,
                false,
            );
        }
    }
}

/// `tools[]`: client tools (no type, or `custom`); server tools are blocked.
fn parse_tools(tools: &[Value], ir: &mut Ir) -> Result<(), TranslateError> {
    for t in tools {
        match get_str(t, "type") {
            None | Some("custom") => {
                let name = get_str(t, "name").ok_or_else(|| malformed("tools[].name missing"))?;
                ir.tools.push(Tool {
                    name: name.into(),
                    description: get_str(t, "description").map(str::to_string),
                    schema: t.get("input_schema").cloned(),
                });
            }
            Some(other) => ir.block(format!("server tool {other}"), OTHERS, true),
        }
    }
    Ok(())
}

/// `tool_choice`: auto, any (required), none or one named tool; it may also turn parallel tool
/// use off.
fn parse_tool_choice(tc: &Value, ir: &mut Ir) -> Result<(), TranslateError> {
    ir.tool_choice = match get_str(tc, "type") {
        Some("auto") => Some(ToolChoice::Auto),
        Some("any") => Some(ToolChoice::Required),
        Some("none") => Some(ToolChoice::None),
        Some("tool") => Some(ToolChoice::Named(
            get_str(tc, "name")
                .ok_or_else(|| malformed("tool_choice.name missing"))?
                .into(),
        )),
        other => {
            return Err(malformed(format!(
                "tool_choice type {}",
                other.unwrap_or("?")
            )))
        }
    };
    if tc.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
        ir.parallel_tool_calls = Some(false);
    }
    Ok(())
}

/// Token limit, sampling and stop sequences.
fn parse_sampling(body: &Map<String, Value>, ir: &mut Ir) {
    ir.max_tokens = get_u64(body, "max_tokens");
    ir.temperature = get_f64(body, "temperature");
    ir.top_p = get_f64(body, "top_p");
    ir.top_k = get_u64(body, "top_k");
    if ir.top_k.is_some() {
        ir.block("top_k", &[OPENAI], false);
    }
    if let Some(s) = get_array(body, "stop_sequences") {
        ir.stop
            .extend(s.iter().filter_map(Value::as_str).map(str::to_string));
    }
}

/// `thinking`: disabled, enabled with a budget, or any other type (adaptive: budget -1).
fn parse_thinking(th: &Value, ir: &mut Ir) {
    match get_str(th, "type") {
        Some("disabled") => {}
        Some("enabled") => {
            ir.thinking_budget = get_u64(th, "budget_tokens").map(|b| b as i64);
            ir.block("thinking", &[OPENAI], false);
        }
        _ => {
            ir.thinking_budget = Some(-1);
            ir.block("thinking", &[OPENAI], false);
        }
    }
}

fn parse_source(src: &Value, kind: MediaKind) -> Result<Option<Media>, TranslateError> {
    match get_str(src, "type") {
        Some("base64") => {
            let mime = get_str(src, "media_type").map(str::to_string);
            let data = get_str(src, "data").ok_or_else(|| malformed("source.data missing"))?;
            let kind = mime.as_deref().map_or(kind, MediaKind::of_mime);
            Ok(Some(Media {
                kind,
                mime,
                source: Source::Base64(data.into()),
            }))
        }
        Some("url") => {
            let url = get_str(src, "url").ok_or_else(|| malformed("source.url missing"))?;
            Ok(Some(Media {
                kind,
                mime: None,
                source: Source::Url(url.into()),
            }))
        }
        Some(_) => Ok(None),
        None => Err(malformed("source.type missing")),
    }
}

fn parse_blocks(c: &Value, ir: &mut Ir, ctx: Ctx) -> Result<Vec<Part>, TranslateError> {
    let blocks = match c {
        Value::String(s) => return Ok(vec![Part::Text(s.clone())]),
        Value::Array(b) => b,
        Value::Null => return Ok(vec![]),
        _ => return Err(malformed("content must be a string or an array of blocks")),
    };
    let mut parts = Vec::with_capacity(blocks.len());
    for b in blocks {
        let ty = get_str(b, "type").ok_or_else(|| malformed("content block without type"))?;
        match ty {
            "text" => parts.push(Part::Text(
                get_str(b, "text")
                    .ok_or_else(|| malformed("text block without text"))?
                    .into(),
            )),
            "image" | "document" => media_parts(ty, b, ir, ctx, &mut parts)?,
            "tool_use" => {
                let id = get_str(b, "id").ok_or_else(|| malformed("tool_use.id missing"))?;
                let name = get_str(b, "name").ok_or_else(|| malformed("tool_use.name missing"))?;
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                parts.push(Part::ToolCall {
                    id: id.into(),
                    name: name.into(),
                    args: input.to_string(),
                });
            }
            "tool_result" => {
                let id = get_str(b, "tool_use_id")
                    .ok_or_else(|| malformed("tool_result.tool_use_id missing"))?;
                let content = parse_blocks(
                    b.get("content").unwrap_or(&Value::Null),
                    ir,
                    Ctx::ToolResult,
                )?;
                let is_error = b.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                parts.push(Part::ToolResult {
                    id: id.into(),
                    name: None,
                    content,
                    is_error,
                });
            }
            // The model's own reasoning from earlier turns: only Anthropic can take it back.
            "thinking" | "redacted_thinking" => {}
            other => ir.block(format!("content block type {other}"), OTHERS, true),
        }
    }
    Ok(parts)
}

/// An image or document block. A document of plain text is its text; a document of content
/// blocks is those blocks; a source type the others lack is blocked.
fn media_parts(
    ty: &str,
    b: &Value,
    ir: &mut Ir,
    ctx: Ctx,
    parts: &mut Vec<Part>,
) -> Result<(), TranslateError> {
    let src = b
        .get("source")
        .ok_or_else(|| malformed("block without source"))?;
    let kind = if ty == "image" {
        MediaKind::Image
    } else {
        MediaKind::Document
    };
    if ty == "document" && get_str(src, "type") == Some("text") {
        parts.push(Part::Text(get_str(src, "data").unwrap_or("").into()));
        return Ok(());
    }
    if ty == "document" && get_str(src, "type") == Some("content") {
        let inner = parse_blocks(src.get("content").unwrap_or(&Value::Null), ir, ctx)?;
        parts.extend(inner);
        return Ok(());
    }
    match parse_source(src, kind)? {
        Some(media) => {
            ir.check_media(&media, ctx);
            parts.push(Part::Media(media));
        }
        None => ir.block(
            format!("{ty} source type {}", get_str(src, "type").unwrap_or("?")),
            OTHERS,
            true,
        ),
    }
    Ok(())
}

fn media_block(m: &Media) -> Value {
    let ty = if m.kind == MediaKind::Image {
        "image"
    } else {
        "document"
    };
    let source = match &m.source {
        Source::Base64(d) => json!({"type": "base64", "media_type": m.mime_or_guess(), "data": d}),
        Source::Url(u) => json!({"type": "url", "url": u}),
    };
    json!({"type": ty, "source": source})
}

fn blocks(parts: &[&Part], role: Role) -> Vec<Value> {
    let mut results = Vec::new();
    let mut rest = Vec::new();
    for p in parts {
        match p {
            Part::Text(t) if t.is_empty() => {}
            Part::Text(t) => rest.push(json!({"type": "text", "text": t})),
            Part::Media(m) => rest.push(media_block(m)),
            Part::ToolCall { id, name, args } => rest.push(json!({
                "type": "tool_use", "id": anthropic_tool_id(id), "name": name, "input": args_object(args),
            })),
            Part::ToolResult { id, content, is_error, .. } => {
                let has_media = content.iter().any(|c| matches!(c, Part::Media(_)));
                let content = if has_media {
                    let inner: Vec<&Part> = content.iter().collect();
                    Value::Array(blocks(&inner, Role::User))
                } else {
                    json!(joined_text(content))
                };
                let mut r = json!({"type": "tool_result", "tool_use_id": anthropic_tool_id(id), "content": content});
                if *is_error {
                    r["is_error"] = json!(true);
                }
                results.push(r);
            }
        }
    }
    // Tool results must open a user turn.
    if role == Role::User {
        results.extend(rest);
        results
    } else {
        rest
    }
}

/// `max_tokens`: the client's, else `default_max_tokens` (None: omitted, for count_tokens).
pub(crate) fn emit_request(
    ir: &Ir,
    model: &str,
    stream: bool,
    default_max_tokens: Option<u64>,
) -> Value {
    let mut msgs = Vec::new();
    for (role, parts) in merged_turns(&ir.messages) {
        let content = blocks(&parts, role);
        if content.is_empty() {
            continue;
        }
        let role = if role == Role::User {
            "user"
        } else {
            "assistant"
        };
        msgs.push(json!({"role": role, "content": content}));
    }
    let mut b = json!({"model": model, "messages": msgs});
    if let Some(n) = ir.max_tokens.or(default_max_tokens) {
        b["max_tokens"] = json!(n);
    }
    let system: Vec<&str> = ir
        .system
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    if !system.is_empty() {
        b["system"] = json!(system.join("\n\n"));
    }
    if stream {
        b["stream"] = json!(true);
    }
    if let Some(t) = ir.temperature {
        b["temperature"] = json!(t.clamp(0.0, 1.0));
    }
    if let Some(t) = ir.top_p {
        b["top_p"] = json!(t);
    }
    if let Some(k) = ir.top_k {
        b["top_k"] = json!(k);
    }
    if !ir.stop.is_empty() {
        b["stop_sequences"] = json!(ir.stop);
    }
    emit_tools(ir, &mut b);
    if let Some(budget) = ir.thinking_budget.filter(|b| *b > 0) {
        b["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    if let Some(u) = &ir.user {
        b["metadata"] = json!({"user_id": u});
    }
    b
}

/// `tools` and `tool_choice` (none without tools). A tool without a schema takes no
/// arguments; `tool_choice` is sent only when the client chose one or turned parallel tool use
/// off (which a `none` choice cannot carry).
fn emit_tools(ir: &Ir, b: &mut Value) {
    if ir.tools.is_empty() {
        return;
    }
    let tools: Vec<Value> = ir
        .tools
        .iter()
        .map(|t| {
            let mut o = json!({
                "name": t.name,
                "input_schema": t.schema.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            });
            if let Some(d) = &t.description {
                o["description"] = json!(d);
            }
            o
        })
        .collect();
    b["tools"] = Value::Array(tools);
    let mut tc = match &ir.tool_choice {
        None | Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::None) => json!({"type": "none"}),
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::Named(n)) => json!({"type": "tool", "name": n}),
    };
    let no_parallel = ir.parallel_tool_calls == Some(false);
    if no_parallel && tc["type"] != "none" {
        tc["disable_parallel_tool_use"] = json!(true);
    }
    if ir.tool_choice.is_some() || no_parallel {
        b["tool_choice"] = tc;
    }
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

pub(crate) fn parse_response(v: &Value) -> Result<Resp, TranslateError> {
    let content = get_array(v, "content").ok_or_else(|| malformed("response without content"))?;
    let mut parts = Vec::new();
    for b in content {
        match get_str(b, "type") {
            Some("text") => parts.push(Part::Text(get_str(b, "text").unwrap_or("").into())),
            Some("tool_use") => parts.push(Part::ToolCall {
                id: get_str(b, "id").unwrap_or("").into(),
                name: get_str(b, "name").unwrap_or("").into(),
                args: b
                    .get("input")
                    .map(value_text)
                    .unwrap_or_else(|| "{}".into()),
            }),
            _ => {}
        }
    }
    let finish =
        get_str(v, "stop_reason").map(|r| Finish::from_anthropic(r, get_str(v, "stop_sequence")));
    Ok(Resp {
        id: get_str(v, "id").unwrap_or("").into(),
        choices: vec![Choice { parts, finish }],
        usage: v
            .get("usage")
            .map(FullUsage::from_anthropic)
            .unwrap_or_default(),
    })
}

pub(crate) fn emit_response(r: &Resp, model: &str) -> Value {
    let empty = Choice {
        parts: vec![],
        finish: None,
    };
    let c = r.choices.first().unwrap_or(&empty);
    let parts: Vec<&Part> = c.parts.iter().collect();
    let content = blocks(&parts, Role::Assistant);
    let has_calls = c.parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    let finish = c.finish.clone().unwrap_or(if has_calls {
        Finish::ToolCalls
    } else {
        Finish::Stop
    });
    let (reason, seq) = finish.to_anthropic();
    json!({
        "id": anthropic_msg_id(&r.id),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": seq,
        "usage": r.usage.to_anthropic(),
    })
}

pub(crate) fn anthropic_msg_id(upstream: &str) -> String {
    if upstream.starts_with("msg_") {
        upstream.to_string()
    } else if upstream.is_empty() {
        "msg_gateway".to_string()
    } else {
        format!("msg_{}", anthropic_tool_id(upstream))
    }
}
