//! Non-streamed responses and the stop-reason mappings.

use serde_json::Value;

use crate::protocol::Protocol;
use crate::translate::{
    anthropic_emit_response, anthropic_parse_response, gemini_emit_response, gemini_parse_response,
    openai_emit_response, openai_parse_response, responses_emit_response, to_vec, Part,
    TranslateError,
};
use crate::usage::{response_usage, FullUsage, Usage};
use crate::util::{get_u64, parse_json};

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

fn parse(protocol: Protocol, v: &Value) -> Result<Resp, TranslateError> {
    match protocol {
        Protocol::OpenAi => openai_parse_response(v),
        Protocol::Anthropic => anthropic_parse_response(v),
        Protocol::Gemini => gemini_parse_response(v),
    }
}

/// Translates a successful upstream JSON response into the client's protocol; `client_model`
/// is echoed as the response's model. Returns the body and the usage read from it. When
/// `upstream == client` the body is returned unchanged.
pub fn translate_response(
    upstream: Protocol,
    client: Protocol,
    body: &[u8],
    client_model: &str,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    if upstream == client {
        parse_json(body)?;
        return Ok((body.to_vec(), response_usage(upstream, body)));
    }
    let v = parse_json(body)?;
    let resp = parse(upstream, &v)?;
    let out = match client {
        Protocol::OpenAi => openai_emit_response(&resp, client_model),
        Protocol::Anthropic => anthropic_emit_response(&resp, client_model),
        Protocol::Gemini => gemini_emit_response(&resp, client_model),
    };
    Ok((to_vec(&out)?, resp.usage.public()))
}

/// Translates a successful upstream JSON answer (Anthropic Messages, Gemini `generateContent`
/// or OpenAI Chat Completions) into an OpenAI Responses API `response` object for a client of
/// `POST /v1/responses`; `client_model` is echoed as its model. Returns the body and the usage
/// read from it.
pub fn translate_responses_answer(
    upstream: Protocol,
    body: &[u8],
    client_model: &str,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    let v = parse_json(body)?;
    let resp = parse(upstream, &v)?;
    let reasoning = match upstream {
        Protocol::Gemini => v
            .get("usageMetadata")
            .and_then(|u| get_u64(u, "thoughtsTokenCount")),
        Protocol::OpenAi => v
            .get("usage")
            .and_then(|u| u.get("completion_tokens_details"))
            .and_then(|d| get_u64(d, "reasoning_tokens")),
        // Anthropic counts thinking within `output_tokens` without breaking it out.
        Protocol::Anthropic => None,
    };
    let out = responses_emit_response(&resp, client_model, reasoning.unwrap_or(0));
    Ok((to_vec(&out)?, resp.usage.public()))
}

#[cfg(test)]
mod tests;
