//! One embeddings call through a channel, for the semantic response cache: OpenAI's
//! `POST /v1/embeddings` with the channel's URL, headers and first credential, within a
//! deadline. Used by the proxies (a prompt's embedding) and by explain alike.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};
use switchyard_engine::Provider;

use crate::channel::{ChannelRuntime, Target};
use crate::client::HttpClient;

/// The largest embeddings answer read.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// An embedding and the input tokens the upstream counted for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vector: Vec<f32>,
    pub input_tokens: u64,
}

/// Why no embedding came back (a short reason, never a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedError(pub String);

impl std::fmt::Display for EmbedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether a channel of `provider` answers OpenAI's embeddings API.
pub fn embeds(provider: Provider) -> bool {
    matches!(provider, Provider::Openai | Provider::Azure)
}

/// Asks `channel` for the embedding of `text` with `model`, within `timeout`.
pub async fn embed(
    client: &HttpClient,
    channel: &ChannelRuntime,
    model: &str,
    text: &str,
    timeout: Duration,
) -> Result<Embedded, EmbedError> {
    let call = async {
        if channel.mock.is_some() || !embeds(channel.provider()) {
            return Err(EmbedError("the channel has no embeddings API".into()));
        }
        let credential = channel
            .credentials
            .first()
            .ok_or_else(|| EmbedError("the channel has no credential".into()))?;
        let credential = credential
            .authorized(client, timeout)
            .await
            .map_err(|_| EmbedError("the credential could not be authorised".into()))?;
        let body = Bytes::from(json!({"model": model, "input": text}).to_string());
        let target = Target {
            method: &Method::POST,
            path: "/v1/embeddings",
            query: None,
            model,
        };
        let request = channel
            .request(target, None, &credential, body)
            .map_err(|_| EmbedError("the request could not be built".into()))?;
        let response = client
            .request(request)
            .await
            .map_err(|e| EmbedError(format!("transport: {}", e.cause().as_str())))?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|_| EmbedError("the answer could not be read".into()))?
            .to_bytes();
        if !status.is_success() {
            return Err(EmbedError(format!("status {}", status.as_u16())));
        }
        parse(&bytes).ok_or_else(|| EmbedError("the answer holds no embedding".into()))
    };
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| Err(EmbedError("timed out".into())))
}

/// The first embedding of an OpenAI embeddings answer (floats), and its input tokens.
pub fn parse(bytes: &[u8]) -> Option<Embedded> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    let values = v.pointer("/data/0/embedding")?.as_array()?;
    let vector: Option<Vec<f32>> = values
        .iter()
        .map(|x| x.as_f64().map(|x| x as f32))
        .collect();
    let vector = vector.filter(|v| !v.is_empty())?;
    let input_tokens = v
        .pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some(Embedded {
        vector,
        input_tokens,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_first_float_embedding_and_its_tokens_are_read() {
        let answer = br#"{"data":[{"embedding":[0.5,-1]}],"usage":{"prompt_tokens":7}}"#;
        let e = parse(answer).unwrap();
        assert_eq!((e.vector, e.input_tokens), (vec![0.5, -1.0], 7));
        assert_eq!(parse(br#"{"data":[{"embedding":[]}]}"#), None);
        assert_eq!(parse(br#"{"data":[{"embedding":"AAAA"}]}"#), None);
        assert_eq!(parse(br#"{"data":[{"embedding":[1,"x"]}]}"#), None);
        assert_eq!(parse(b"nope"), None);
    }
}
