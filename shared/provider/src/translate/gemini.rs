//! Gemini `generateContent`: request parse/render, response parse/render.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::ir::{
    args_object, joined_text, merged_turns, Choice, Ctx, Finish, Ir, Media, MediaKind, Msg, Part,
    Resp, ResponseFormat, Role, Source, Tool, ToolChoice, ANTHROPIC, OPENAI,
};
use super::schema::{from_gemini_schema, to_gemini_schema};
use crate::error::{malformed, TranslateError};
use crate::usage::FullUsage;
use crate::util::{get_array, get_f64, get_str, get_u64, synth_call_id, value_text};

const OTHERS: &[crate::protocol::Protocol] = &[OPENAI, ANTHROPIC];

fn system_texts(si: &Value, ir: &mut Ir) -> Result<(), TranslateError> {
    match si {
        Value::Null => {}
        Value::String(s) => ir.system.push(s.clone()),
        Value::Object(_) => {
            for p in get_array(si, "parts").into_iter().flatten() {
                match get_str(p, "text") {
                    Some(t) => ir.system.push(t.into()),
                    None => ir.block("non-text systemInstruction", OTHERS, true),
                }
            }
        }
        _ => return Err(malformed("systemInstruction must be a Content object")),
    }
    Ok(())
}

/// Tool-result text from a `functionResponse.response` object, and whether it is an error.
fn response_text(resp: &Value) -> (String, bool) {
    if let Some(o) = resp.as_object() {
        if o.len() == 1 {
            for key in ["output", "result", "content"] {
                if let Some(Value::String(s)) = o.get(key) {
                    return (s.clone(), false);
                }
            }
            if let Some(e) = o.get("error") {
                return (value_text(e), true);
            }
        }
    }
    (value_text(resp), false)
}

/// One field of the request, under its camelCase name or its snake_case alias.
fn either<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    v.get(camel).or_else(|| v.get(snake))
}

pub(crate) fn parse_request(body: &Map<String, Value>, ir: &mut Ir) -> Result<(), TranslateError> {
    if let Some(si) = body
        .get("systemInstruction")
        .or_else(|| body.get("system_instruction"))
    {
        system_texts(si, ir)?;
    }
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("`contents` must be an array"))?;
    // Function calls not yet answered: (name, id), to give id-less responses their call's id.
    let mut pending: Vec<(String, String)> = Vec::new();
    for (mi, c) in contents.iter().enumerate() {
        let msg = parse_content(c, mi, &mut pending, ir)?;
        ir.messages.push(msg);
    }
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        parse_tools(tools, ir)?;
    }
    if let Some(fcc) = body
        .get("toolConfig")
        .and_then(|t| t.get("functionCallingConfig"))
    {
        parse_function_calling_config(fcc, ir)?;
    }
    if body.get("cachedContent").is_some_and(|c| !c.is_null()) {
        ir.block("cachedContent", OTHERS, true);
    }
    if let Some(g) = body.get("generationConfig").filter(|g| !g.is_null()) {
        parse_generation_config(g, ir);
    }
    Ok(())
}

/// One `contents[mi]` entry: its role and parts (thought parts are dropped).
fn parse_content(
    c: &Value,
    mi: usize,
    pending: &mut Vec<(String, String)>,
    ir: &mut Ir,
) -> Result<Msg, TranslateError> {
    let role = match get_str(c, "role") {
        Some("model") => Role::Assistant,
        Some("user") | Some("function") | None => Role::User,
        Some(other) => return Err(malformed(format!("contents[{mi}].role `{other}`"))),
    };
    let ctx = if role == Role::User {
        Ctx::User
    } else {
        Ctx::Assistant
    };
    let raw_parts = match c.get("parts") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => &a[..],
        Some(_) => return Err(malformed(format!("contents[{mi}].parts must be an array"))),
    };
    let mut parts = Vec::new();
    for (pi, p) in raw_parts.iter().enumerate() {
        if !p.is_object() {
            return Err(malformed("part is not an object"));
        }
        if p.get("thought").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(part) = parse_part(p, (mi, pi), ctx, pending, ir)? {
            parts.push(part);
        }
    }
    Ok(Msg { role, parts })
}

/// One part of a content; `at` is its (content, part) position. None for parts that carry
/// nothing to translate (unknown kinds are recorded as blocked features).
fn parse_part(
    p: &Value,
    at: (usize, usize),
    ctx: Ctx,
    pending: &mut Vec<(String, String)>,
    ir: &mut Ir,
) -> Result<Option<Part>, TranslateError> {
    if let Some(t) = get_str(p, "text") {
        return Ok(Some(Part::Text(t.into())));
    }
    if let Some(d) = either(p, "inlineData", "inline_data") {
        let media = inline_data(d)?;
        ir.check_media(&media, ctx);
        return Ok(Some(Part::Media(media)));
    }
    if let Some(f) = either(p, "fileData", "file_data") {
        let media = file_data(f)?;
        ir.check_media(&media, ctx);
        return Ok(Some(Part::Media(media)));
    }
    if let Some(fc) = either(p, "functionCall", "function_call") {
        return function_call(fc, at, pending).map(Some);
    }
    if let Some(fr) = either(p, "functionResponse", "function_response") {
        return function_response_part(fr, at, pending).map(Some);
    }
    if p.get("executableCode").is_some() || p.get("codeExecutionResult").is_some() {
        ir.block("code execution parts", OTHERS, true);
        return Ok(None);
    }
    // Part metadata alone is no content; any other key is a part kind the others lack.
    let key = p.as_object().and_then(|o| {
        o.keys().find(|k| {
            !matches!(
                k.as_str(),
                "thoughtSignature" | "thought" | "videoMetadata" | "partMetadata"
            )
        })
    });
    if let Some(k) = key {
        ir.block(format!("part type {k}"), OTHERS, true);
    }
    Ok(None)
}

/// `inlineData`: base64 bytes; a missing MIME type is `application/octet-stream`.
fn inline_data(d: &Value) -> Result<Media, TranslateError> {
    let mime = get_str(d, "mimeType")
        .or_else(|| get_str(d, "mime_type"))
        .unwrap_or("application/octet-stream");
    let data = get_str(d, "data").ok_or_else(|| malformed("inlineData.data missing"))?;
    Ok(Media {
        kind: MediaKind::of_mime(mime),
        mime: Some(mime.into()),
        source: Source::Base64(data.into()),
    })
}

/// `fileData`: a URI; a missing MIME type is guessed from the URI (an image by default).
fn file_data(f: &Value) -> Result<Media, TranslateError> {
    let uri = get_str(f, "fileUri")
        .or_else(|| get_str(f, "file_uri"))
        .ok_or_else(|| malformed("fileData.fileUri missing"))?;
    let mime = get_str(f, "mimeType")
        .or_else(|| get_str(f, "mime_type"))
        .map(str::to_string);
    let kind = mime.as_deref().map_or(MediaKind::Image, MediaKind::of_mime);
    let mut media = Media {
        kind,
        mime,
        source: Source::Url(uri.into()),
    };
    if media.mime.is_none() {
        media.mime = Some(media.mime_or_guess());
        media.kind = MediaKind::of_mime(media.mime.as_deref().unwrap_or(""));
    }
    Ok(media)
}

/// `functionCall` in the history: a call without an id gets a stable one from its position and
/// name, and waits in `pending` for its response.
fn function_call(
    fc: &Value,
    (mi, pi): (usize, usize),
    pending: &mut Vec<(String, String)>,
) -> Result<Part, TranslateError> {
    let name = get_str(fc, "name").ok_or_else(|| malformed("functionCall.name missing"))?;
    let args = fc.get("args").cloned().unwrap_or_else(|| json!({}));
    let id = match get_str(fc, "id") {
        Some(id) => id.to_string(),
        None => synth_call_id(&["gemini-history", &mi.to_string(), &pi.to_string(), name]),
    };
    pending.push((name.to_string(), id.clone()));
    Ok(Part::ToolCall {
        id,
        name: name.into(),
        args: args.to_string(),
    })
}

/// `functionResponse` in the history: an id-less response answers the oldest pending call of
/// the same name (or gets a stable id of its own when none is pending).
fn function_response_part(
    fr: &Value,
    (mi, pi): (usize, usize),
    pending: &mut Vec<(String, String)>,
) -> Result<Part, TranslateError> {
    let name = get_str(fr, "name").ok_or_else(|| malformed("functionResponse.name missing"))?;
    let id = match get_str(fr, "id") {
        Some(id) => {
            if let Some(pos) = pending.iter().position(|(_, i)| i == id) {
                pending.remove(pos);
            }
            id.to_string()
        }
        None => match pending.iter().position(|(n, _)| n == name) {
            Some(pos) => pending.remove(pos).1,
            None => synth_call_id(&["gemini-orphan", &mi.to_string(), &pi.to_string(), name]),
        },
    };
    let (text, is_error) = response_text(fr.get("response").unwrap_or(&Value::Null));
    Ok(Part::ToolResult {
        id,
        name: Some(name.into()),
        content: vec![Part::Text(text)],
        is_error,
    })
}

/// `tools[]`: function declarations become tools; any other tool kind is blocked.
fn parse_tools(tools: &[Value], ir: &mut Ir) -> Result<(), TranslateError> {
    for t in tools {
        let Some(o) = t.as_object() else {
            return Err(malformed("tools[] is not an object"));
        };
        for (k, val) in o {
            if k == "functionDeclarations" || k == "function_declarations" {
                for f in val.as_array().into_iter().flatten() {
                    let name = get_str(f, "name")
                        .ok_or_else(|| malformed("functionDeclarations[].name missing"))?;
                    let schema = f
                        .get("parametersJsonSchema")
                        .cloned()
                        .or_else(|| f.get("parameters").map(from_gemini_schema));
                    ir.tools.push(Tool {
                        name: name.into(),
                        description: get_str(f, "description").map(str::to_string),
                        schema,
                    });
                }
            } else {
                ir.block(format!("Gemini tool {k}"), OTHERS, true);
            }
        }
    }
    Ok(())
}

/// `toolConfig.functionCallingConfig`: allowed names narrow the tools; `ANY` with one allowed
/// name forces that function.
fn parse_function_calling_config(fcc: &Value, ir: &mut Ir) -> Result<(), TranslateError> {
    let allowed: Vec<String> = get_array(fcc, "allowedFunctionNames")
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if !allowed.is_empty() {
        ir.tools.retain(|t| allowed.contains(&t.name));
    }
    ir.tool_choice = match get_str(fcc, "mode") {
        Some("ANY") if allowed.len() == 1 => Some(ToolChoice::Named(allowed[0].clone())),
        Some("ANY") => Some(ToolChoice::Required),
        Some("NONE") => Some(ToolChoice::None),
        Some("AUTO") | Some("VALIDATED") | Some("MODE_UNSPECIFIED") | None => {
            Some(ToolChoice::Auto)
        }
        Some(other) => return Err(malformed(format!("functionCallingConfig.mode `{other}`"))),
    };
    Ok(())
}

/// `generationConfig`: sampling settings, the response format, and the output kinds the others
/// cannot give.
fn parse_generation_config(g: &Value, ir: &mut Ir) {
    ir.max_tokens = get_u64(g, "maxOutputTokens");
    ir.temperature = get_f64(g, "temperature");
    ir.top_p = get_f64(g, "topP");
    ir.top_k = get_u64(g, "topK");
    if ir.top_k.is_some() {
        ir.block("top_k", &[OPENAI], false);
    }
    if let Some(s) = get_array(g, "stopSequences") {
        ir.stop
            .extend(s.iter().filter_map(Value::as_str).map(str::to_string));
    }
    if let Some(n) = get_u64(g, "candidateCount") {
        ir.n = Some(n);
        if n > 1 {
            ir.block("candidateCount > 1", &[ANTHROPIC], false);
        }
    }
    ir.seed = g.get("seed").and_then(Value::as_i64);
    // A zero penalty is no penalty.
    ir.presence_penalty = get_f64(g, "presencePenalty").filter(|p| *p != 0.0);
    ir.frequency_penalty = get_f64(g, "frequencyPenalty").filter(|p| *p != 0.0);
    if ir.presence_penalty.is_some() {
        ir.block("presencePenalty", &[ANTHROPIC], false);
    }
    if ir.frequency_penalty.is_some() {
        ir.block("frequencyPenalty", &[ANTHROPIC], false);
    }
    parse_response_mime(g, ir);
    block_output_kinds(g, ir);
}

/// `responseMimeType` (with its schema): plain text, JSON mode or a JSON schema.
fn parse_response_mime(g: &Value, ir: &mut Ir) {
    match get_str(g, "responseMimeType") {
        None | Some("text/plain") => {}
        Some("application/json") => {
            let schema = g
                .get("responseJsonSchema")
                .or_else(|| g.get("_responseJsonSchema"))
                .cloned()
                .or_else(|| g.get("responseSchema").map(from_gemini_schema));
            ir.response_format = Some(match schema {
                Some(schema) => {
                    ir.block("JSON mode (responseSchema)", &[ANTHROPIC], false);
                    ResponseFormat::JsonSchema {
                        name: "response".into(),
                        schema,
                        strict: None,
                    }
                }
                None => {
                    ir.block(
                        "JSON mode (responseMimeType application/json)",
                        &[ANTHROPIC],
                        false,
                    );
                    ResponseFormat::JsonObject
                }
            });
        }
        Some(other) => ir.block(format!("responseMimeType {other}"), OTHERS, false),
    }
}

/// Outputs only Gemini gives: logprobs, non-text modalities, speech, thought summaries.
fn block_output_kinds(g: &Value, ir: &mut Ir) {
    if g.get("responseLogprobs").and_then(Value::as_bool) == Some(true)
        || g.get("logprobs").is_some()
    {
        ir.block("logprobs", OTHERS, false);
    }
    if get_array(g, "responseModalities")
        .is_some_and(|m| m.iter().any(|x| x.as_str() != Some("TEXT")))
    {
        ir.block("non-text responseModalities", OTHERS, false);
    }
    if g.get("speechConfig").is_some() {
        ir.block("speechConfig", OTHERS, false);
    }
    if g.get("thinkingConfig")
        .and_then(|t| t.get("includeThoughts"))
        .and_then(Value::as_bool)
        == Some(true)
    {
        ir.block("thinkingConfig.includeThoughts", OTHERS, false);
    }
}

fn media_part(m: &Media) -> Value {
    match &m.source {
        Source::Base64(d) => json!({"inlineData": {"mimeType": m.mime_or_guess(), "data": d}}),
        Source::Url(u) => json!({"fileData": {"mimeType": m.mime_or_guess(), "fileUri": u}}),
    }
}

fn function_response(text: &str, is_error: bool) -> Value {
    if !is_error {
        if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(text) {
            return v;
        }
    }
    if is_error {
        json!({"error": text})
    } else {
        json!({"output": text})
    }
}

pub(crate) fn emit_request(ir: &Ir) -> Result<Value, TranslateError> {
    let mut b = json!({"contents": contents(ir)?});
    let system: Vec<Value> = ir
        .system
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| json!({"text": s}))
        .collect();
    if !system.is_empty() {
        b["systemInstruction"] = json!({"parts": system});
    }
    if !ir.tools.is_empty() {
        let decls: Vec<Value> = ir.tools.iter().map(function_declaration).collect();
        b["tools"] = json!([{"functionDeclarations": decls}]);
    }
    if let Some(tc) = ir.tool_choice.as_ref().filter(|_| !ir.tools.is_empty()) {
        b["toolConfig"] = json!({"functionCallingConfig": match tc {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::Named(n) => json!({"mode": "ANY", "allowedFunctionNames": [n]}),
        }});
    }
    if let Some(g) = generation_config(ir) {
        b["generationConfig"] = g;
    }
    Ok(b)
}

/// `contents`: one per merged turn, function responses first; empty turns are left out.
fn contents(ir: &Ir) -> Result<Vec<Value>, TranslateError> {
    let names = ir.call_names();
    let mut contents = Vec::new();
    for (role, parts) in merged_turns(&ir.messages) {
        let mut results = Vec::new();
        let mut rest = Vec::new();
        for p in parts {
            match p {
                Part::Text(t) if t.is_empty() => {}
                Part::Text(t) => rest.push(json!({"text": t})),
                Part::Media(m) => rest.push(media_part(m)),
                Part::ToolCall { id, name, args } => rest.push(json!({
                    "functionCall": {"id": id, "name": name, "args": args_object(args)},
                })),
                Part::ToolResult {
                    id,
                    name,
                    content,
                    is_error,
                } => {
                    // Gemini answers a call by its function's name: the result's own, or its
                    // call's.
                    let name = name
                        .as_deref()
                        .or_else(|| names.get(id.as_str()).copied())
                        .ok_or_else(|| {
                            malformed(format!("tool result `{id}` has no matching tool call"))
                        })?;
                    results.push(json!({"functionResponse": {
                        "id": id, "name": name, "response": function_response(&joined_text(content), *is_error),
                    }}));
                }
            }
        }
        results.extend(rest);
        if results.is_empty() {
            continue;
        }
        let role = if role == Role::User { "user" } else { "model" };
        contents.push(json!({"role": role, "parts": results}));
    }
    Ok(contents)
}

/// A tool as a function declaration. A schema that is only an empty object is left out; one
/// Gemini's schema dialect can say goes in `parameters`, any other in `parametersJsonSchema`.
fn function_declaration(t: &Tool) -> Value {
    let mut d = json!({"name": t.name});
    if let Some(desc) = &t.description {
        d["description"] = json!(desc);
    }
    let empty_object = t.schema.as_ref().is_some_and(is_empty_object_schema);
    if let Some(s) = t.schema.as_ref().filter(|_| !empty_object) {
        match to_gemini_schema(s) {
            Some(g) => d["parameters"] = g,
            None => d["parametersJsonSchema"] = s.clone(),
        }
    }
    d
}

/// An object schema without properties and with nothing else that constrains it.
fn is_empty_object_schema(s: &Value) -> bool {
    s.get("properties")
        .and_then(Value::as_object)
        .is_none_or(|p| p.is_empty())
        && s.get("type").and_then(Value::as_str) == Some("object")
        && s.as_object().is_some_and(|o| {
            o.keys().all(|k| {
                matches!(
                    k.as_str(),
                    "type" | "properties" | "required" | "$schema" | "additionalProperties"
                )
            })
        })
}

/// `generationConfig` as Gemini spells it: one field per setting, each left out when the request
/// has none.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    candidate_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<ThinkingConfig>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ThinkingConfig {
    thinking_budget: i64,
}

/// `generationConfig`: only the settings the request has (one candidate is the default; both
/// JSON mode and a JSON schema are the JSON MIME type). None when it has none.
fn generation_config(ir: &Ir) -> Option<Value> {
    let (response_mime_type, response_json_schema) = match &ir.response_format {
        None => (None, None),
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema { schema, .. }) => (Some("application/json"), Some(schema)),
    };
    let g = GenerationConfig {
        max_output_tokens: ir.max_tokens,
        temperature: ir.temperature,
        top_p: ir.top_p,
        top_k: ir.top_k,
        stop_sequences: &ir.stop,
        candidate_count: ir.n.filter(|n| *n != 1),
        seed: ir.seed,
        presence_penalty: ir.presence_penalty,
        frequency_penalty: ir.frequency_penalty,
        response_mime_type,
        response_json_schema,
        thinking_config: ir
            .thinking_budget
            .map(|thinking_budget| ThinkingConfig { thinking_budget }),
    };
    // Serializing plain numbers, strings and a JSON value cannot fail.
    match serde_json::to_value(g) {
        Ok(Value::Object(g)) if !g.is_empty() => Some(Value::Object(g)),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// A candidate's `content.parts` that answer, its thought summaries left out.
pub(crate) fn answer_parts(candidate: &Value) -> impl Iterator<Item = &Value> {
    candidate
        .get("content")
        .and_then(|c| get_array(c, "parts"))
        .into_iter()
        .flatten()
        .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
}

/// The id of a Gemini function call: its own, or a stable one from the response id and position.
pub(crate) fn call_id(fc: &Value, response_id: &str, candidate: usize, position: usize) -> String {
    match get_str(fc, "id") {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => synth_call_id(&[
            response_id,
            &candidate.to_string(),
            &position.to_string(),
            get_str(fc, "name").unwrap_or(""),
        ]),
    }
}

pub(crate) fn parse_response(v: &Value) -> Result<Resp, TranslateError> {
    if !v.is_object() {
        return Err(malformed("response is not an object"));
    }
    let id = get_str(v, "responseId").unwrap_or("").to_string();
    let mut choices = Vec::new();
    let mut calls_seen = 0usize;
    for (ci, c) in get_array(v, "candidates").into_iter().flatten().enumerate() {
        let mut parts = Vec::new();
        for p in answer_parts(c) {
            if let Some(t) = get_str(p, "text") {
                match parts.last_mut() {
                    Some(Part::Text(prev)) => prev.push_str(t),
                    _ => parts.push(Part::Text(t.into())),
                }
            } else if let Some(fc) = p.get("functionCall") {
                parts.push(Part::ToolCall {
                    id: call_id(fc, &id, ci, calls_seen),
                    name: get_str(fc, "name").unwrap_or("").into(),
                    args: fc
                        .get("args")
                        .map(Value::to_string)
                        .unwrap_or_else(|| "{}".into()),
                });
                calls_seen += 1;
            }
        }
        let has_calls = parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
        let finish = get_str(c, "finishReason").map(|r| match Finish::from_gemini(r) {
            Finish::Stop if has_calls => Finish::ToolCalls,
            f => f,
        });
        choices.push(Choice { parts, finish });
    }
    if choices.is_empty() {
        // Blocked prompt (promptFeedback.blockReason) or an empty answer.
        let blocked = v
            .get("promptFeedback")
            .and_then(|f| get_str(f, "blockReason"))
            .is_some();
        choices.push(Choice {
            parts: vec![],
            finish: Some(if blocked {
                Finish::ContentFilter
            } else {
                Finish::Stop
            }),
        });
    }
    Ok(Resp {
        id,
        choices,
        usage: v
            .get("usageMetadata")
            .map(FullUsage::from_gemini)
            .unwrap_or_default(),
    })
}

pub(crate) fn emit_response(r: &Resp, model: &str) -> Value {
    let candidates: Vec<Value> = r
        .choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut parts: Vec<Value> = c
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text(t) => Some(json!({"text": t})),
                    Part::ToolCall { id, name, args } => Some(json!({
                        "functionCall": {"id": id, "name": name, "args": args_object(args)},
                    })),
                    _ => None,
                })
                .collect();
            if parts.is_empty() {
                parts.push(json!({"text": ""}));
            }
            let finish = c.finish.clone().unwrap_or(Finish::Stop);
            json!({"content": {"role": "model", "parts": parts}, "finishReason": finish.to_gemini(), "index": i})
        })
        .collect();
    json!({
        "candidates": candidates,
        "usageMetadata": r.usage.to_gemini(),
        "modelVersion": model,
        "responseId": r.id,
    })
}
