//! Requests: parsed once from the client's protocol into a neutral form, rendered for any target.

mod anthropic;
mod gemini;
mod ir;
mod openai;
mod responses;
pub(crate) mod schema;

use serde_json::{json, Map, Value};

pub(crate) use crate::error::malformed;
pub use crate::error::TranslateError;
use crate::protocol::Protocol;
use crate::util::{get_u64, parse_json_lenient, parse_object};

pub(crate) use anthropic::{
    anthropic_msg_id, emit_response as anthropic_emit_response,
    parse_response as anthropic_parse_response,
};
pub(crate) use gemini::{
    answer_parts as gemini_answer_parts, call_id as gemini_call_id,
    emit_response as gemini_emit_response, parse_response as gemini_parse_response,
};
pub use ir::MEDIA_TOKEN_ESTIMATE;
pub(crate) use ir::{args_object, Choice, Finish, Ir, Part, Resp, ANTHROPIC, GEMINI};
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
