//! The OpenAI Responses API (`POST /v1/responses`) as a client protocol towards Anthropic and
//! Gemini members, and towards OpenAI-compatible members that speak only Chat Completions:
//! request items into the neutral form, a neutral answer into a `response` object. An OpenAI
//! member with the Responses API is called on it (passthrough), so nothing here renders a
//! Responses request or reads a Responses answer.

use serde_json::{json, Map, Value};

use super::ir::{
    parse_data_url, Ctx, Finish, Ir, Media, MediaKind, Msg, Part, Resp, ResponseFormat, Role,
    Source, Tool, ToolChoice, ANTHROPIC, GEMINI, OPENAI,
};
use super::openai::{media_from_url, tool_choice_mode};
use crate::error::{malformed, TranslateError};
use crate::usage::FullUsage;
use crate::util::{get_array, get_f64, get_str, get_u64, value_text};

/// Every chat protocol: what only the Responses API can do is blocked for all of them, OpenAI's
/// Chat Completions included (a Responses request reaches OpenAI's chat protocol only for a
/// member without the Responses API; see [`super::ChatRequest::to_chat_completions_body`]).
const OTHERS: &[crate::protocol::Protocol] = &[OPENAI, ANTHROPIC, GEMINI];

/// Parses a Responses request body into `ir`. What only the Responses API can do (stored state,
/// background runs, built-in tools, …) is recorded as a feature no chat protocol can express.
pub(crate) fn parse_request(body: &Map<String, Value>, ir: &mut Ir) -> Result<(), TranslateError> {
    if let Some(instructions) = body.get("instructions").filter(|i| !i.is_null()) {
        let text = instructions
            .as_str()
            .ok_or_else(|| malformed("`instructions` must be a string"))?;
        if !text.is_empty() {
            ir.system.push(text.to_string());
        }
    }
    match body.get("input") {
        None | Some(Value::Null) => return Err(malformed("`input` is missing")),
        Some(Value::String(s)) => ir.messages.push(Msg {
            role: Role::User,
            parts: vec![Part::Text(s.clone())],
        }),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                parse_item(item, i, ir)?;
            }
        }
        Some(_) => return Err(malformed("`input` must be a string or an array of items")),
    }
    block_stateful_features(body, ir);
    if let Some(tools) = get_array(body, "tools") {
        parse_tools(tools, ir)?;
    }
    parse_tool_choice(body.get("tool_choice"), ir)?;
    ir.parallel_tool_calls = body.get("parallel_tool_calls").and_then(Value::as_bool);
    ir.max_tokens = get_u64(body, "max_output_tokens");
    ir.temperature = get_f64(body, "temperature");
    ir.top_p = get_f64(body, "top_p");
    if let Some(format) = body
        .get("text")
        .and_then(|t| t.get("format"))
        .filter(|f| !f.is_null())
    {
        parse_text_format(format, ir);
    }
    if body
        .get("text")
        .and_then(|t| t.get("verbosity"))
        .is_some_and(|x| !x.is_null())
    {
        ir.block("text.verbosity", OTHERS, false);
    }
    ir.user = get_str(body, "safety_identifier")
        .or_else(|| get_str(body, "user"))
        .map(str::to_string);
    Ok(())
}

/// Stored state, templates, reasoning settings, background runs and the like: only the
/// Responses API has them.
fn block_stateful_features(body: &Map<String, Value>, ir: &mut Ir) {
    for (key, name) in [
        ("previous_response_id", "previous_response_id"),
        ("conversation", "conversation"),
        ("prompt", "prompt templates (`prompt`)"),
        ("reasoning", "reasoning"),
        ("max_tool_calls", "max_tool_calls"),
        ("top_logprobs", "top_logprobs"),
    ] {
        if body.get(key).is_some_and(|x| !x.is_null()) {
            ir.block(name, OTHERS, false);
        }
    }
    if body.get("background").and_then(Value::as_bool) == Some(true) {
        ir.block("background", OTHERS, false);
    }
    if get_array(body, "include").is_some_and(|a| !a.is_empty()) {
        ir.block("include", OTHERS, false);
    }
    if get_str(body, "truncation") == Some("auto") {
        ir.block("truncation auto", OTHERS, false);
    }
}

/// `tools[]`: function tools (flat: name, description, parameters); built-in tools are blocked.
fn parse_tools(tools: &[Value], ir: &mut Ir) -> Result<(), TranslateError> {
    for t in tools {
        match get_str(t, "type") {
            Some("function") => {
                let name = get_str(t, "name").ok_or_else(|| malformed("tools[].name missing"))?;
                ir.tools.push(Tool {
                    name: name.into(),
                    description: get_str(t, "description").map(str::to_string),
                    schema: t.get("parameters").filter(|p| !p.is_null()).cloned(),
                });
            }
            other => ir.block(
                format!("built-in tool {}", other.unwrap_or("without a type")),
                OTHERS,
                true,
            ),
        }
    }
    Ok(())
}

/// `tool_choice`: a mode string, or `{"type": "function", "name"}`.
fn parse_tool_choice(tc: Option<&Value>, ir: &mut Ir) -> Result<(), TranslateError> {
    match tc {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => ir.tool_choice = Some(tool_choice_mode(s)?),
        Some(tc) => match get_str(tc, "type") {
            Some("function") => {
                let name =
                    get_str(tc, "name").ok_or_else(|| malformed("tool_choice.name missing"))?;
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

/// `text.format`: text, JSON mode or a JSON schema (named `response` when unnamed).
fn parse_text_format(format: &Value, ir: &mut Ir) {
    match get_str(format, "type") {
        Some("text") => {}
        Some("json_object") => {
            ir.response_format = Some(ResponseFormat::JsonObject);
            ir.block("text.format json_object", &[ANTHROPIC], false);
        }
        Some("json_schema") => {
            ir.response_format = Some(ResponseFormat::JsonSchema {
                name: get_str(format, "name").unwrap_or("response").to_string(),
                schema: format.get("schema").cloned().unwrap_or_else(|| json!({})),
                strict: format.get("strict").and_then(Value::as_bool),
            });
            ir.block("text.format json_schema", &[ANTHROPIC], false);
        }
        other => ir.block(
            format!("text.format {}", other.unwrap_or("?")),
            OTHERS,
            false,
        ),
    }
}

/// One `input` item: a message, a function call or its output.
fn parse_item(item: &Value, i: usize, ir: &mut Ir) -> Result<(), TranslateError> {
    let kind = get_str(item, "type").unwrap_or(if item.get("role").is_some() {
        "message"
    } else {
        ""
    });
    match kind {
        "message" => {
            let role = get_str(item, "role")
                .ok_or_else(|| malformed(format!("input[{i}].role missing")))?;
            let content = item.get("content").unwrap_or(&Value::Null);
            // Sorted by role as the Chat Completions parser does, with this protocol's content
            // parser and words (ARCHITECTURE.md, "one copy").
            match role {
                "system" | "developer" => {
                    let parts = parse_content(content, ir, Ctx::User)?;
                    ir.push_system(&parts, "non-text instructions", OTHERS);
                }
                "user" => {
                    let parts = parse_content(content, ir, Ctx::User)?;
                    ir.push_user(parts);
                }
                "assistant" => {
                    let parts = parse_content(content, ir, Ctx::Assistant)?;
                    push_assistant(ir, parts);
                }
                other => return Err(malformed(format!("input[{i}]: unknown role `{other}`"))),
            }
        }
        "function_call" => {
            let id = get_str(item, "call_id")
                .ok_or_else(|| malformed(format!("input[{i}].call_id missing")))?;
            let name = get_str(item, "name")
                .ok_or_else(|| malformed(format!("input[{i}].name missing")))?;
            let args = item
                .get("arguments")
                .map(value_text)
                .unwrap_or_else(|| "{}".into());
            push_assistant(
                ir,
                vec![Part::ToolCall {
                    id: id.into(),
                    name: name.into(),
                    args,
                }],
            );
        }
        "function_call_output" => {
            let id = get_str(item, "call_id")
                .ok_or_else(|| malformed(format!("input[{i}].call_id missing")))?;
            let content = match item.get("output") {
                Some(Value::String(s)) => vec![Part::Text(s.clone())],
                Some(parts @ Value::Array(_)) => parse_content(parts, ir, Ctx::ToolResult)?,
                _ => return Err(malformed(format!("input[{i}].output missing"))),
            };
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
        "" => return Err(malformed(format!("input[{i}] has no type"))),
        other => ir.block(format!("input item type {other}"), OTHERS, true),
    }
    Ok(())
}

/// Appends assistant parts, to the previous assistant turn when the history's last turn is one
/// (a message and the function calls that follow it are one turn).
fn push_assistant(ir: &mut Ir, parts: Vec<Part>) {
    match ir.messages.last_mut() {
        Some(last) if last.role == Role::Assistant => last.parts.extend(parts),
        _ => ir.messages.push(Msg {
            role: Role::Assistant,
            parts,
        }),
    }
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
            "input_text" | "output_text" | "text" => {
                let t = get_str(item, "text").ok_or_else(|| malformed("text part without text"))?;
                parts.push(Part::Text(t.into()));
            }
            "refusal" => parts.push(Part::Text(get_str(item, "refusal").unwrap_or("").into())),
            "input_image" => match get_str(item, "image_url") {
                Some(url) => {
                    let media = media_from_url(url, MediaKind::Image)?;
                    ir.check_media(&media, ctx);
                    parts.push(Part::Media(media));
                }
                None => ir.block("file_id reference", OTHERS, true),
            },
            "input_file" => {
                if let Some(data) = get_str(item, "file_data") {
                    let media = match parse_data_url(data) {
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
                    };
                    ir.check_media(&media, ctx);
                    parts.push(Part::Media(media));
                } else if let Some(url) = get_str(item, "file_url") {
                    let media = Media {
                        kind: MediaKind::Document,
                        mime: None,
                        source: Source::Url(url.into()),
                    };
                    ir.check_media(&media, ctx);
                    parts.push(Part::Media(media));
                } else {
                    ir.block("file_id reference", OTHERS, true);
                }
            }
            other => ir.block(format!("content part type {other}"), OTHERS, true),
        }
    }
    Ok(parts)
}

/// A neutral answer as a Responses API `response` object. `store` is false: the gateway keeps
/// no responses, so none can be retrieved or continued with `previous_response_id`.
/// `reasoning_tokens` is the part of the output the upstream spent thinking, when it says.
pub(crate) fn emit_response(r: &Resp, model: &str, reasoning_tokens: u64) -> Value {
    let id = response_id(&r.id);
    let choice = r.choices.first();
    let mut output = Vec::new();
    let text: String = choice
        .into_iter()
        .flat_map(|c| c.parts.iter())
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    if !text.is_empty() {
        output.push(message_item(
            &format!("msg_{}", id.trim_start_matches("resp_")),
            &text,
            "completed",
        ));
    }
    for p in choice.into_iter().flat_map(|c| c.parts.iter()) {
        if let Part::ToolCall { id, name, args } = p {
            output.push(call_item(id, name, args, "completed"));
        }
    }
    response_object(
        &id,
        model,
        output,
        choice.and_then(|c| c.finish.as_ref()),
        Some(usage(&r.usage, reasoning_tokens)),
        false,
    )
}

/// An assistant `message` output item with one `output_text` part (none while `text` is empty
/// and the item `in_progress`).
pub(crate) fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "in_progress" {
        json!([])
    } else {
        json!([output_text(text)])
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

pub(crate) fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// A `function_call` output item: `fc_` + the call id.
pub(crate) fn call_item(call_id: &str, name: &str, args: &str, status: &str) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{call_id}"),
        "call_id": call_id,
        "name": name,
        "arguments": args,
        "status": status,
    })
}

/// The `response` object around `output`: `in_progress` while streaming, else `completed`, or
/// `incomplete` with its reason when the upstream stopped at the token limit or a filter.
pub(crate) fn response_object(
    id: &str,
    model: &str,
    output: Vec<Value>,
    finish: Option<&Finish>,
    usage: Option<Value>,
    in_progress: bool,
) -> Value {
    let incomplete = match finish {
        Some(Finish::Length) => Some("max_output_tokens"),
        Some(Finish::ContentFilter) => Some("content_filter"),
        _ => None,
    };
    let status = match (in_progress, incomplete) {
        (true, _) => "in_progress",
        (false, Some(_)) => "incomplete",
        (false, None) => "completed",
    };
    json!({
        "id": id,
        "object": "response",
        "created_at": 0,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": incomplete.filter(|_| !in_progress).map(|reason| json!({"reason": reason})),
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    })
}

/// Responses-API usage: input including cached tokens, output including reasoning tokens.
pub(crate) fn usage(u: &FullUsage, reasoning_tokens: u64) -> Value {
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": u.cached},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens.min(u.output)},
        "total_tokens": u.input.saturating_add(u.output),
    })
}

/// `resp_` + the upstream's id (alphanumerics kept), or a fixed id when it gave none.
pub(crate) fn response_id(upstream: &str) -> String {
    let kept: String = upstream
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    if kept.starts_with("resp_") {
        kept
    } else if kept.is_empty() {
        "resp_switchyard".to_string()
    } else {
        format!("resp_{kept}")
    }
}

#[cfg(test)]
mod tests;
