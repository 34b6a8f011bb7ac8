//! The endpoints the proxy serves and what the failover rules say about each.

use http::HeaderMap;
use switchyard_provider::{Protocol, UsageScanner};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    ChatCompletions,
    Completions,
    Embeddings,
    Responses,
    ImagesGenerations,
    AudioSpeech,
    AudioTranscriptions,
    Messages,
    Models,
    MessagesCountTokens,
    /// Gemini `:generateContent` and `:streamGenerateContent` (the stream flag comes from the
    /// path).
    GeminiGenerate,
    GeminiCountTokens,
    /// OpenAI's moderations; the model may be left out (see [`DEFAULT_MODERATION_MODEL`]).
    Moderations,
    /// Reranking in the shape Cohere, Jina and vLLM share, served by OpenAI-compatible
    /// channels and the simulator only (no other protocol has it).
    Rerank,
    /// `ANY /passthrough/{channel}/{path}`: a path of one channel's own API, forwarded as it is
    /// with the channel's credential (no route, no selection, no failover).
    Passthrough,
    /// The Realtime API: a WebSocket session (`GET /v1/realtime?model=...`), served by OpenAI,
    /// Azure OpenAI and simulated channels.
    Realtime,
    /// OpenAI's Files API (`/v1/files*`): served on the channel holding the file.
    Files,
    /// OpenAI's Batch API (`/v1/batches*`): served on the channel holding the batch.
    Batches,
    /// Anthropic's Message Batches API (`/v1/messages/batches*`).
    MessageBatches,
}

/// The model a moderations request that names none is routed as, and sent upstream as (the
/// member's upstream model written into the body): OpenAI's own default.
pub const DEFAULT_MODERATION_MODEL: &str = switchyard_sim::DEFAULT_MODERATION_MODEL;

impl Endpoint {
    pub const ALL: [Endpoint; 19] = [
        Endpoint::ChatCompletions,
        Endpoint::Completions,
        Endpoint::Embeddings,
        Endpoint::Responses,
        Endpoint::ImagesGenerations,
        Endpoint::AudioSpeech,
        Endpoint::AudioTranscriptions,
        Endpoint::Messages,
        Endpoint::Models,
        Endpoint::MessagesCountTokens,
        Endpoint::GeminiGenerate,
        Endpoint::GeminiCountTokens,
        Endpoint::Moderations,
        Endpoint::Rerank,
        Endpoint::Passthrough,
        Endpoint::Realtime,
        Endpoint::Files,
        Endpoint::Batches,
        Endpoint::MessageBatches,
    ];

    /// The protocol clients of this endpoint speak (and get their errors in).
    pub fn protocol(self) -> Protocol {
        match self {
            Endpoint::Messages | Endpoint::MessagesCountTokens | Endpoint::MessageBatches => {
                Protocol::Anthropic
            }
            Endpoint::GeminiGenerate | Endpoint::GeminiCountTokens => Protocol::Gemini,
            _ => Protocol::OpenAi,
        }
    }

    /// The reader of the usage a stream of this endpoint passed through reports (a Responses API
    /// stream names its figures its own way).
    pub fn usage_scanner(self) -> UsageScanner {
        match self {
            Endpoint::Responses => UsageScanner::for_responses(),
            _ => UsageScanner::new(self.protocol()),
        }
    }

    /// Chat endpoints, translatable between the three protocols.
    pub fn is_chat(self) -> bool {
        matches!(
            self,
            Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::GeminiGenerate
        )
    }

    pub fn is_count_tokens(self) -> bool {
        matches!(
            self,
            Endpoint::MessagesCountTokens | Endpoint::GeminiCountTokens
        )
    }

    /// A plain answer of this endpoint reports its token usage (chat, the Responses API, legacy
    /// completions, embeddings, rerank); the others' answers carry none the gateway reads.
    pub fn reports_usage(self) -> bool {
        self.is_chat()
            || matches!(
                self,
                Endpoint::Responses
                    | Endpoint::Completions
                    | Endpoint::Embeddings
                    | Endpoint::Rerank
            )
    }

    /// An OpenAI endpoint Azure OpenAI does not serve: its Azure members are never picked (the
    /// engine's [`switchyard_engine::AZURE_BIT`]).
    pub fn azure_lacks(self) -> bool {
        matches!(self, Endpoint::Moderations | Endpoint::Rerank)
    }

    /// Chat, count-tokens or the Responses API: the body is parsed into the neutral form and
    /// may be translated.
    pub fn translatable(self) -> bool {
        self.is_chat() || self.is_count_tokens() || self == Endpoint::Responses
    }

    /// The path, as served downstream and appended to a channel's base URL upstream (Gemini
    /// paths carry the model: see [`crate::upstream::gemini_path`]).
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
            Endpoint::Embeddings => "/v1/embeddings",
            Endpoint::Responses => "/v1/responses",
            Endpoint::ImagesGenerations => "/v1/images/generations",
            Endpoint::AudioSpeech => "/v1/audio/speech",
            Endpoint::AudioTranscriptions => "/v1/audio/transcriptions",
            Endpoint::Messages => "/v1/messages",
            Endpoint::Models => "/v1/models",
            Endpoint::MessagesCountTokens => "/v1/messages/count_tokens",
            Endpoint::GeminiGenerate | Endpoint::GeminiCountTokens => "/v1beta/models",
            Endpoint::Moderations => "/v1/moderations",
            Endpoint::Rerank => "/v1/rerank",
            Endpoint::Passthrough => "/passthrough",
            Endpoint::Realtime => "/v1/realtime",
            Endpoint::Files => "/v1/files",
            Endpoint::Batches => "/v1/batches",
            Endpoint::MessageBatches => "/v1/messages/batches",
        }
    }

    /// The OpenTelemetry GenAI `gen_ai.operation.name`: the conventions' own names where one
    /// fits (`chat`, `generate_content`, `text_completion`, `embeddings`), else the label.
    pub fn genai_operation(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::Responses => "chat",
            Endpoint::GeminiGenerate => "generate_content",
            Endpoint::Completions => "text_completion",
            Endpoint::Embeddings => "embeddings",
            other => other.label(),
        }
    }

    /// Low-cardinality label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat_completions",
            Endpoint::Completions => "completions",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Responses => "responses",
            Endpoint::ImagesGenerations => "images_generations",
            Endpoint::AudioSpeech => "audio_speech",
            Endpoint::AudioTranscriptions => "audio_transcriptions",
            Endpoint::Messages => "messages",
            Endpoint::Models => "models",
            Endpoint::MessagesCountTokens => "messages_count_tokens",
            Endpoint::GeminiGenerate => "gemini_generate_content",
            Endpoint::GeminiCountTokens => "gemini_count_tokens",
            Endpoint::Moderations => "moderations",
            Endpoint::Rerank => "rerank",
            Endpoint::Passthrough => "passthrough",
            Endpoint::Realtime => "realtime",
            Endpoint::Files => "files",
            Endpoint::Batches => "batches",
            Endpoint::MessageBatches => "message_batches",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Non-idempotent generation endpoints are never retried: `images/*` always; `audio/*`
    /// unless the request carries an `Idempotency-Key`; `responses` only when it asks for a
    /// `background` run without an `Idempotency-Key` (a failed stateless attempt created nothing
    /// that a retry could duplicate, so it fails over like chat).
    pub fn retry_allowed(self, headers: &HeaderMap, background: bool) -> bool {
        let keyed = headers.contains_key(&crate::request::names::IDEMPOTENCY_KEY);
        match self {
            Endpoint::ImagesGenerations => false,
            Endpoint::AudioSpeech | Endpoint::AudioTranscriptions => keyed,
            Endpoint::Responses => keyed || !background,
            _ => true,
        }
    }

    /// Every 2xx answer of this endpoint is JSON (speech is audio; a transcription may be plain
    /// text, subtitles or JSON; a file's content and a batch's results are the file's bytes).
    pub fn answers_json(self) -> bool {
        !matches!(
            self,
            Endpoint::AudioSpeech
                | Endpoint::AudioTranscriptions
                | Endpoint::Models
                | Endpoint::Passthrough
                | Endpoint::Files
                | Endpoint::MessageBatches
        )
    }

    /// A request of this endpoint that reached a channel is a row of the usage report. Not a
    /// pass-through (no route, no tokens read), a realtime handshake (its session reports its
    /// usage, per response) or a files or batch call (a batch's usage is accounted when it
    /// completes, per request it served).
    pub fn reports_own_usage(self) -> bool {
        !matches!(
            self,
            Endpoint::Passthrough
                | Endpoint::Realtime
                | Endpoint::Files
                | Endpoint::Batches
                | Endpoint::MessageBatches
        )
    }

    /// The body is multipart form data rather than JSON.
    pub fn multipart(self) -> bool {
        self == Endpoint::AudioTranscriptions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_idempotent_endpoints_retry_only_with_an_idempotency_key() {
        let none = HeaderMap::new();
        let mut keyed = HeaderMap::new();
        keyed.insert("idempotency-key", http::HeaderValue::from_static("k1"));
        assert!(!Endpoint::ImagesGenerations.retry_allowed(&keyed, false));
        for e in [Endpoint::AudioSpeech, Endpoint::AudioTranscriptions] {
            assert!(!e.retry_allowed(&none, false), "{e:?}");
            assert!(e.retry_allowed(&keyed, false), "{e:?}");
        }
        assert!(Endpoint::ChatCompletions.retry_allowed(&none, false));
        assert!(Endpoint::Embeddings.retry_allowed(&none, false));
    }

    #[test]
    fn responses_retry_unless_background_without_an_idempotency_key() {
        let none = HeaderMap::new();
        let mut keyed = HeaderMap::new();
        keyed.insert("idempotency-key", http::HeaderValue::from_static("k1"));
        assert!(Endpoint::Responses.retry_allowed(&none, false));
        assert!(Endpoint::Responses.retry_allowed(&keyed, false));
        assert!(!Endpoint::Responses.retry_allowed(&none, true));
        assert!(Endpoint::Responses.retry_allowed(&keyed, true));
    }
}
