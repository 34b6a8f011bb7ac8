//! Switchyard's protocol translation: any SDK in front of any provider.
//!
//! Architecture invariant: this crate is pure. No I/O, no async runtime, no clock reads; bytes
//! in, bytes out (its one side effect: a `tracing` warning when an upstream reports a usage
//! figure that cannot be a token count). It translates chat requests, responses, streams and errors between three wire
//! protocols:
//!
//! - **OpenAI** Chat Completions (`POST /v1/chat/completions`),
//! - **Anthropic** Messages (`POST /v1/messages`, plus `/v1/messages/count_tokens`),
//! - **Gemini** native `generateContent` / `streamGenerateContent?alt=sse` / `countTokens`.
//!
//! The OpenAI Responses API (`POST /v1/responses`) is a fourth client dialect: parsed by
//! [`ChatRequest::parse_responses`] into the same neutral form, its answers written by
//! [`translate_responses_answer`], its streams by [`StreamTranslator::for_responses`].
//!
//! A request is parsed once into a neutral form ([`ChatRequest::parse`]); the gateway asks it
//! which feature a target cannot express ([`ChatRequest::unsupported_for`]) and renders it for
//! the chosen upstream ([`ChatRequest::to_body`]). Responses go back through
//! [`translate_response`], streams through a [`StreamTranslator`] (incremental: each upstream
//! event is translated as soon as it is complete), errors through [`translate_error_body`] and
//! [`stream_error_event`]. Same-protocol traffic is passed through by the caller; usage is
//! still read with [`response_usage`] (a Responses API answer's with
//! [`responses_answer_usage`]) and [`UsageScanner`].
//!
//! Usage convention: [`Usage::input_tokens`] is the whole prompt *including* cached tokens
//! (as OpenAI and Gemini report it; Anthropic's figures are converted). Every figure an upstream
//! reports is bounded by [`MAX_REPORTED_TOKENS`]; a request's usage by [`MAX_REQUEST_TOKENS`].
//!
//! AWS Bedrock's Converse API is not a fourth protocol: [`bedrock`] converts Anthropic Messages
//! requests to it and its answers, event streams and errors back, so a Bedrock upstream is
//! spoken through Anthropic's shape.
//!
//! The field-by-field mapping, stop reasons, error statuses, dropped hints, unsupported
//! features and stream event orders are documented in `TRANSLATION.md` next to this crate.

pub mod bedrock;
mod error;
pub mod errors;
mod meta;
pub mod protocol;
mod response;
pub mod sse;
pub mod stream;
pub mod translate;
mod usage;
mod util;

pub use errors::{
    anthropic_error_type, error_message, gateway_error_body, gateway_stream_error_event,
    gemini_error_status, openai_error_type, stream_error_event, translate_error_body,
    translate_status, MAX_ERROR_MESSAGE_CHARS,
};
pub use meta::{answer_meta, AnswerMeta};
pub use protocol::Protocol;
pub use response::{translate_response, translate_responses_answer};
pub use sse::{SseDecoder, SseEvent};
pub use stream::{StreamAssembler, StreamDigest, StreamDigester, StreamTranslator, UsageScanner};
pub use translate::{
    count_tokens_response, parse_count_tokens_response, ChatRequest, TranslateError,
    MEDIA_TOKEN_ESTIMATE,
};
pub use usage::{
    openai_usage, rerank_usage, response_usage, responses_answer_usage, usage_key, usage_text,
    KeyIndex, Usage, MAX_REPORTED_TOKENS, MAX_REQUEST_TOKENS,
};
