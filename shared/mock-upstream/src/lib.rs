//! A scriptable mock LLM upstream that speaks three protocols natively, for tests, demos and
//! failover drills:
//!
//! - **OpenAI** (`/v1/chat/completions`, `/v1/completions`, `/v1/responses`, `/v1/embeddings`,
//!   `/v1/models`, images, audio), credential from `Authorization: Bearer`;
//! - **Anthropic Messages** (`/v1/messages`, `/v1/messages/count_tokens`), credential from
//!   `x-api-key`, Anthropic's SSE event sequence (`message_start`, `content_block_*`, `ping`,
//!   `message_delta`, `message_stop`);
//! - **Gemini** (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`,
//!   `:countTokens`), model from the path, credential from `x-goog-api-key` or `?key=`;
//! - **Azure OpenAI** (`/openai/deployments/{deployment}/chat/completions?api-version=...`, and
//!   the same for `completions`, `embeddings`, images and audio; `/openai/responses`; the v1
//!   surface `/openai/v1/...`), answered as OpenAI, model from the deployment in the path,
//!   credential from `api-key`; a request without the `api-version` the deployments surface
//!   needs gets Azure's 404 `{"error":{"code":"404","message":"Resource not found"}}`;
//! - **Google Vertex AI** (`/v1/projects/{project}/locations/{location}/publishers/google/models/
//!   {model}:generateContent`, `:streamGenerateContent?alt=sse`, `:countTokens`), answered as
//!   Gemini, model from the path, credential an access token from `Authorization: Bearer` that
//!   this mock's token endpoint (`POST /token`) issued for a service-account assertion it
//!   verified ([`vertex`]); without a valid one Vertex's 401 `UNAUTHENTICATED`;
//! - **AWS Bedrock** (`/model/{modelId}/converse`, `/converse-stream` in AWS's binary event
//!   stream, `/count-tokens`), model from the path, credential the access key id of a SigV4
//!   `Authorization` the mock verifies with its test keys' secrets ([`bedrock`]); without a valid
//!   signature Bedrock's 403 (`UnrecognizedClientException`, `InvalidSignatureException`).
//!
//! - **The Realtime API** (`GET /v1/realtime?model=...`, Azure's `/openai/realtime` and
//!   `/openai/v1/realtime`): a WebSocket session ([`MockUpstream::realtime`] says what it received).
//! - **OpenAI's Files and Batch APIs** (`/v1/files`, `/v1/batches`), in memory: a batch
//!   completes on the first poll after its creation, each line answered by the simulator.
//!
//! Scripted errors come in the shape of the path's protocol (OpenAI `{"error":{...}}`,
//! Anthropic `{"type":"error",...}`, Gemini `{"error":{"code","message","status"}}`, Bedrock
//! `{"message"}` with `x-amzn-ErrorType`), and
//! [`Behavior::tool_call`], [`Behavior::text`] and [`Behavior::cached_tokens`] are said in each
//! protocol's own fields, streamed or not.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::time::Duration;
//! use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
//!
//! let mock = MockUpstream::start().await?;
//! mock.on(
//!     Matcher::path("/v1/chat/completions").credential("sk-a"),
//!     Behavior::status(429).retry_after(7).times(2),
//! );
//! mock.on(Matcher::any().model("slow"), Behavior::ok().latency(Duration::from_millis(200)));
//! mock.on(
//!     Matcher::path("/v1/messages"),
//!     Behavior::ok().tool_call("get_weather", r#"{"city":"Paris"}"#).cached_tokens(512),
//! );
//! // point a client at mock.base_url() ...
//! assert_eq!(mock.hits(), 0);
//! # Ok(()) }
//! ```
//!
//! Rules are checked in insertion order; the first matching rule with uses left answers, and
//! when none matches the endpoint's default OK answer is served. The answers' shapes come from
//! [`sim`] (the `switchyard-sim` crate, re-exported here), which the data plane's
//! in-process `provider: mock` uses too.

mod azure;
pub mod bedrock;
mod control;
mod files;
mod realtime;
mod respond;
mod script;
mod server;
pub mod vertex;

pub use control::{BehaviorSpec, MatcherSpec, RuleSpec, StreamSpec, ToolCallSpec};
pub use respond::DEFAULT_STREAM_CHUNKS;
pub use script::ReportedUsage;
pub use script::{
    Behavior, HitCounts, Matcher, RealtimeLog, RecordedRequest, RuleReport, StreamShape,
};
pub use server::{MockOptions, MockUpstream};
/// The pure answer builders (the `switchyard-sim` crate), shared with the data plane's
/// `provider: mock`.
pub use switchyard_sim as sim;
