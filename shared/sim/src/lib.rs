//! The simulated upstream: pure builders for the answers an LLM upstream gives, in each
//! protocol's own wire format — OpenAI (chat, completions, responses, embeddings, ...),
//! Anthropic Messages and Gemini `generateContent` — as JSON bodies and SSE events. No sockets
//! and no state beyond a process-wide id counter, so the data plane's in-process
//! `provider: mock` and the mock HTTP server (`switchyard-mock-upstream`) produce the same shapes.
//!
//! An [`Answer`] says *what* the upstream answers (text, tool calls, prompt and cached tokens);
//! the builder of each protocol says it in that protocol: [`chat_answer_json`] and
//! [`chat_answer_chunks`] (OpenAI chat), [`anthropic_answer_json`] and
//! [`anthropic_answer_events`], [`gemini_response_json`], [`gemini_stream_responses`] and
//! [`gemini_events`]. The endpoints that carry no tool calls (legacy completions, Responses,
//! embeddings, models, images, audio) have text-only builders; moderations and rerank
//! ([`moderation_json`], [`rerank_json`]) score the request body they are given. The Realtime
//! API's server events (a WebSocket session's JSON frames) are built by the `realtime_*`
//! functions, and a simulated session's answers to each client event by [`RealtimeSim`].
//!
//! Errors come in each provider's shape ([`openai_error_json`], [`anthropic_error_json`],
//! [`gemini_error_json`]); [`Protocol::of_path`] and [`error_json`] pick the shape a request path
//! expects.
//!
//! Every SSE helper returns complete events, ready to be written to the wire one by one:
//! `data: ...\n\n` (OpenAI chat and completions), `event: ...\ndata: ...\n\n` (Anthropic and
//! Responses) or `data: ...\r\n\r\n` (Gemini, which ends its lines with CRLF).
//!
//! Modules: [`Answer`] and token counting at the bottom (`answer`), the pieces every protocol
//! shares (`wire`: ids, SSE framing, splitting), the error shapes (`error`), then one module
//! per protocol; this root only declares and re-exports them.

mod answer;
mod anthropic;
mod batch;
mod error;
mod gemini;
mod openai;
mod realtime;
mod scoring;
mod wire;

pub use answer::{estimate_tokens, Answer, ToolCall, DEFAULT_CONTENT, DEFAULT_MODEL};
pub use anthropic::{anthropic_answer_events, anthropic_answer_json, anthropic_count_tokens_json};
pub use batch::{
    batch_json, batch_output_line, file_json, list_json, message_batch_json,
    message_batch_result_line, BatchState, MessageBatchState,
};
pub use error::{
    anthropic_error_json, anthropic_error_kind, error_json, gemini_error_json, gemini_error_status,
    openai_error_json, openai_error_kind, Protocol,
};
pub use gemini::{
    gemini_count_tokens_json, gemini_events, gemini_response_json, gemini_stream_responses,
};
pub use openai::{
    chat_answer_chunks, chat_answer_json, completion_chunks, completion_json, embeddings_json,
    embeddings_json_for, embeddings_json_with, images_json, models_json, response_events,
    response_json, speech_bytes, transcription_json, word_vector, DEFAULT_MODELS, DONE_EVENT,
    EMBEDDING_DIMENSIONS,
};
pub use realtime::{
    realtime_error, realtime_item_created, realtime_response_events, realtime_session_created,
    realtime_session_updated, RealtimeSim,
};
pub use scoring::{moderation_json, rerank_json, DEFAULT_MODERATION_MODEL, MODERATION_CATEGORIES};
pub use wire::{base64_encode, next_id, split_content, split_even};
