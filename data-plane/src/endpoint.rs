//! The endpoints the proxy serves and what the failover rules say about each.

use http::HeaderMap;

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
}

impl Endpoint {
    pub const ALL: [Endpoint; 9] = [
        Endpoint::ChatCompletions,
        Endpoint::Completions,
        Endpoint::Embeddings,
        Endpoint::Responses,
        Endpoint::ImagesGenerations,
        Endpoint::AudioSpeech,
        Endpoint::AudioTranscriptions,
        Endpoint::Messages,
        Endpoint::Models,
    ];

    /// The path, as served downstream and appended to a channel's base URL upstream.
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
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Gateway errors on Anthropic endpoints use the Anthropic error shape.
    pub fn anthropic_errors(self) -> bool {
        self == Endpoint::Messages
    }

    /// SPEC §3: non-idempotent generation endpoints are never retried — `images/*` always;
    /// `audio/*`, `video*` and `responses` unless the request carries an `Idempotency-Key`.
    pub fn retry_allowed(self, headers: &HeaderMap) -> bool {
        match self {
            Endpoint::ImagesGenerations => false,
            Endpoint::AudioSpeech | Endpoint::AudioTranscriptions | Endpoint::Responses => {
                headers.contains_key("idempotency-key")
            }
            _ => true,
        }
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
        assert!(!Endpoint::ImagesGenerations.retry_allowed(&keyed));
        for e in [
            Endpoint::AudioSpeech,
            Endpoint::AudioTranscriptions,
            Endpoint::Responses,
        ] {
            assert!(!e.retry_allowed(&none), "{e:?}");
            assert!(e.retry_allowed(&keyed), "{e:?}");
        }
        assert!(Endpoint::ChatCompletions.retry_allowed(&none));
        assert!(Endpoint::Embeddings.retry_allowed(&none));
    }
}
