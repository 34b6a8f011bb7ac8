//! Non-streamed responses and the stop-reason mappings.

use serde_json::Value;

use crate::error::TranslateError;
use crate::protocol::Protocol;
use crate::translate::{
    anthropic_emit_response, anthropic_parse_response, gemini_emit_response, gemini_parse_response,
    openai_emit_response, openai_parse_response, responses_emit_response, to_vec, Resp,
};
use crate::usage::{response_usage, Usage};
use crate::util::{get_u64, parse_json};

fn parse(protocol: Protocol, v: &Value) -> Result<Resp, TranslateError> {
    match protocol {
        Protocol::OpenAi => openai_parse_response(v),
        Protocol::Anthropic => anthropic_parse_response(v),
        Protocol::Gemini => gemini_parse_response(v),
    }
}

/// A successful upstream JSON answer of `protocol`, read into the neutral form.
pub(crate) fn parse_answer(protocol: Protocol, body: &[u8]) -> Result<Resp, TranslateError> {
    parse(protocol, &parse_json(body)?)
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
