//! What one attempt sends, decided per member: the client's bytes passed through (same protocol,
//! only the model rewritten), or the request translated into the channel's protocol from the
//! client's original — afresh for every member, so failover across protocols never translates a
//! translation.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method};
use switchyard_engine::{Channel, Provider, AZURE_BIT, CHAT_COMPLETIONS_ONLY_BIT};
use switchyard_provider::{count_tokens_response, ChatRequest, Protocol, TranslateError};

use crate::endpoint::Endpoint;
use crate::request::Inspected;
use switchyard_upstream::{channel_protocol, gemini_path};

/// `max_tokens` sent to Anthropic when the client gave none (Anthropic requires one).
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u32 = 4096;

/// The request as the client sent it, with what the wire plan needs: a borrowed view, made
/// from the live request's context ([`crate::context::Ctx::client_request`]) or from a shadow
/// copy, which has no context.
pub struct ClientRequest<'a> {
    pub endpoint: Endpoint,
    pub inspected: &'a Inspected,
    pub body: &'a Bytes,
    /// The client's query string, with any `key=` credential already removed.
    pub query: Option<&'a str>,
    /// Parsed once for translatable endpoints.
    pub chat: Option<&'a ChatRequest>,
}

/// One attempt's upstream request, ready to send to any credential of the channel. Planned per
/// member (its protocol, its upstream model), so a type of its own beside the request's
/// context.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub body: Bytes,
    /// The protocol the upstream answers in.
    pub upstream: Protocol,
    /// The client's protocol.
    pub client: Protocol,
    /// Same protocol in and out: client headers and answer bytes pass through.
    pub passthrough: bool,
    /// An OpenAI client asked for the final usage chunk of a stream.
    pub include_usage: bool,
    /// A passed-through OpenAI stream whose body the gateway changed to ask for usage (the
    /// client did not): the usage chunk is removed from what the client gets.
    pub strip_usage_chunk: bool,
    /// Answered by the gateway itself, no upstream call (count-tokens towards OpenAI, which has
    /// no such endpoint: a local estimate).
    pub local: Option<Bytes>,
}

impl Call {
    pub fn translated(&self) -> bool {
        !self.passthrough
    }
}

fn gemini_action(endpoint: Endpoint, stream: bool) -> &'static str {
    match (endpoint.is_count_tokens(), stream) {
        (true, _) => "countTokens",
        (false, true) => "streamGenerateContent",
        (false, false) => "generateContent",
    }
}

/// The client's query minus credentials (`key=`, Gemini's query-string API key).
pub fn strip_key_param(query: Option<&str>) -> Option<String> {
    let query = query?;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some("key"))
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// Client headers no upstream is sent, beyond those the channel never forwards (credentials,
/// `connection` and the headers it names, `keep-alive`, `te`, `trailer`, `upgrade`): what the
/// client claims about addresses (`forwarded`, `x-forwarded-*`, `x-real-ip`, `via`), which a
/// provider must not take for the gateway's word nor learn internal addresses from; `expect`,
/// answered at the edge (an upstream is sent the whole body at once); and every `proxy-*`
/// header, meant for a proxy on the client's side.
pub fn drop_unforwarded(headers: &mut HeaderMap) {
    const NAMES: [&str; 4] = ["forwarded", "x-real-ip", "via", "expect"];
    let prefixed = |name: &str| name.starts_with("x-forwarded-") || name.starts_with("proxy-");
    if !headers
        .keys()
        .any(|n| prefixed(n.as_str()) || NAMES.contains(&n.as_str()))
    {
        return;
    }
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|n| prefixed(n.as_str()) || NAMES.contains(&n.as_str()))
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// Decides the call for a member of `channel` serving `upstream_model`.
pub fn plan(
    client: &ClientRequest<'_>,
    channel: &Channel,
    upstream_model: &str,
) -> Result<Call, TranslateError> {
    let client_protocol = client.endpoint.protocol();
    let upstream = channel_protocol(channel.provider, client_protocol);
    if client.endpoint == Endpoint::Responses && channel.chat_completions_only() {
        return responses_as_chat_completions(client, upstream_model);
    }
    if upstream == client_protocol {
        return Ok(passthrough(client, upstream_model));
    }
    let Some(chat) = client.chat else {
        return Err(TranslateError::Unsupported(format!(
            "the {} endpoint",
            client.endpoint.path()
        )));
    };
    let mut call = Call {
        method: Method::POST,
        path: String::new(),
        query: None,
        body: Bytes::new(),
        upstream,
        client: client_protocol,
        passthrough: false,
        include_usage: chat.include_usage(),
        strip_usage_chunk: false,
        local: None,
    };
    if client.endpoint.is_count_tokens() {
        plan_count_tokens(&mut call, chat, upstream_model)?;
    } else {
        plan_translated(&mut call, chat, client, upstream_model)?;
    }
    Ok(call)
}

/// The client's protocol is the channel's: its bytes pass through, only the model rewritten
/// (and an OpenAI chat stream asked for its usage).
fn passthrough(client: &ClientRequest<'_>, upstream_model: &str) -> Call {
    let client_protocol = client.endpoint.protocol();
    // Every request is accounted: an OpenAI stream is asked for its usage even when the
    // client did not ask (and the usage chunk is then kept from the client).
    let ask_usage =
        client.endpoint == Endpoint::ChatCompletions && client.inspected.can_ask_stream_usage();
    let (path, body) = match client_protocol {
        Protocol::Gemini => (
            gemini_path(
                upstream_model,
                gemini_action(client.endpoint, client.inspected.stream),
            ),
            client.body.clone(),
        ),
        _ => (
            client.endpoint.path().to_owned(),
            client
                .inspected
                .rewrite_with(client.body, upstream_model, ask_usage),
        ),
    };
    let method = if client.endpoint == Endpoint::Models {
        Method::GET
    } else {
        Method::POST
    };
    Call {
        method,
        path,
        query: client.query.map(str::to_owned),
        body,
        upstream: client_protocol,
        client: client_protocol,
        passthrough: true,
        include_usage: false,
        strip_usage_chunk: ask_usage,
        local: None,
    }
}

/// A count of tokens in the channel's protocol: Anthropic's and Gemini's endpoints, or the
/// gateway's own estimate towards OpenAI (which has no such endpoint).
fn plan_count_tokens(
    call: &mut Call,
    chat: &ChatRequest,
    upstream_model: &str,
) -> Result<(), TranslateError> {
    let upstream = call.upstream;
    match upstream {
        Protocol::OpenAi => {
            let estimate = chat.estimate_input_tokens();
            call.local = Some(Bytes::from(count_tokens_response(call.client, estimate)));
        }
        Protocol::Anthropic => {
            call.path = "/v1/messages/count_tokens".to_owned();
            call.body = Bytes::from(chat.to_count_tokens_body(upstream, upstream_model)?);
        }
        Protocol::Gemini => {
            call.path = gemini_path(upstream_model, "countTokens");
            call.body = Bytes::from(chat.to_count_tokens_body(upstream, upstream_model)?);
        }
    }
    Ok(())
}

/// The request translated into the channel's protocol, sent to its generation endpoint (a
/// Gemini stream as server-sent events).
fn plan_translated(
    call: &mut Call,
    chat: &ChatRequest,
    client: &ClientRequest<'_>,
    upstream_model: &str,
) -> Result<(), TranslateError> {
    let upstream = call.upstream;
    let stream = client.inspected.stream;
    call.body =
        Bytes::from(chat.to_body(upstream, upstream_model, DEFAULT_ANTHROPIC_MAX_TOKENS)?);
    match upstream {
        Protocol::OpenAi => call.path = "/v1/chat/completions".to_owned(),
        Protocol::Anthropic => call.path = "/v1/messages".to_owned(),
        Protocol::Gemini => {
            call.path = gemini_path(upstream_model, gemini_action(client.endpoint, stream));
            if stream {
                call.query = Some("alt=sse".to_owned());
            }
        }
    }
    Ok(())
}

/// A Responses request for an OpenAI-compatible member without the Responses API: sent as Chat
/// Completions, its answer translated back into the Responses shape.
fn responses_as_chat_completions(
    client: &ClientRequest<'_>,
    upstream_model: &str,
) -> Result<Call, TranslateError> {
    let Some(chat) = client.chat else {
        return Err(TranslateError::Unsupported(format!(
            "the {} endpoint",
            client.endpoint.path()
        )));
    };
    Ok(Call {
        method: Method::POST,
        path: "/v1/chat/completions".to_owned(),
        query: None,
        body: Bytes::from(chat.to_chat_completions_body(upstream_model)?),
        upstream: Protocol::OpenAi,
        client: Protocol::OpenAi,
        passthrough: false,
        include_usage: false,
        strip_usage_chunk: false,
        local: None,
    })
}

/// Where [`unsupported`] names what an OpenAI-compatible member without the Responses API lacks
/// (after the three protocols, indexed like [`Protocol::ALL`]).
pub const CHAT_COMPLETIONS_ONLY: usize = 3;

/// The slot of [`unsupported`]'s features that names what `channel` lacks for a request in the
/// `client` protocol.
pub fn feature_index(channel: &Channel, client: Protocol) -> usize {
    let target = channel_protocol(channel.provider, client);
    if target == client && channel.chat_completions_only() {
        CHAT_COMPLETIONS_ONLY
    } else {
        protocol_index(target)
    }
}

/// Providers whose protocol cannot express this request, as the engine's bit set, with the
/// feature each one lacks (indexed like [`Protocol::ALL`], then [`CHAT_COMPLETIONS_ONLY`] for a
/// Responses request that OpenAI-compatible members without the Responses API cannot take).
/// An endpoint Azure does not serve sets the engine's Azure bit, its feature in the client
/// protocol's slot.
pub fn unsupported(
    endpoint: Endpoint,
    chat: Option<&ChatRequest>,
    unparsable: Option<&str>,
) -> (u8, [Option<String>; 4]) {
    let client = endpoint.protocol();
    let mut mask = 0u8;
    let mut features: [Option<String>; 4] = [None, None, None, None];
    if endpoint == Endpoint::Responses {
        let feature = match (chat, unparsable) {
            (Some(chat), _) => chat.unsupported_for_chat_completions(),
            (None, Some(why)) => Some(format!("a body that cannot be translated ({why})")),
            (None, None) => Some(format!("the {} endpoint", endpoint.path())),
        };
        if let Some(feature) = feature {
            mask |= CHAT_COMPLETIONS_ONLY_BIT;
            features[CHAT_COMPLETIONS_ONLY] = Some(feature);
        }
    }
    if endpoint.azure_lacks() {
        // Azure speaks the client's protocol: its slot is the protocol's own (no other use for
        // it), or the one of a member without the Responses API ([`feature_index`]).
        let feature = format!("the {} endpoint", endpoint.path());
        mask |= AZURE_BIT;
        features[CHAT_COMPLETIONS_ONLY] = Some(feature.clone());
        features[protocol_index(client)] = Some(feature);
    }
    for (i, target) in Protocol::ALL.into_iter().enumerate() {
        if target == client {
            continue;
        }
        let feature = match (chat, unparsable) {
            (Some(chat), _) => chat.unsupported_for(target),
            (None, Some(why)) => Some(format!("a body that cannot be translated ({why})")),
            (None, None) => Some(format!("the {} endpoint", endpoint.path())),
        };
        if let Some(feature) = feature {
            mask |= provider_of(target).protocol_bit();
            features[i] = Some(feature);
        }
    }
    (mask, features)
}

pub fn provider_of(protocol: Protocol) -> Provider {
    match protocol {
        Protocol::OpenAi => Provider::Openai,
        Protocol::Anthropic => Provider::Anthropic,
        Protocol::Gemini => Provider::Gemini,
    }
}

pub fn protocol_index(protocol: Protocol) -> usize {
    Protocol::ALL
        .iter()
        .position(|p| *p == protocol)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_parameter_never_goes_upstream() {
        assert_eq!(
            strip_key_param(Some("alt=sse&key=sk-1")),
            Some("alt=sse".into())
        );
        assert_eq!(strip_key_param(Some("key=sk-1")), None);
        assert_eq!(strip_key_param(Some("keyed=1")), Some("keyed=1".into()));
        assert_eq!(strip_key_param(None), None);
    }

    #[test]
    fn a_responses_request_a_chat_completions_body_cannot_express_marks_chat_only_members() {
        let stateful = ChatRequest::parse_responses(
            br#"{"model":"m","input":"hi","previous_response_id":"resp_1"}"#,
            "m",
            false,
        )
        .unwrap();
        let (mask, features) = unsupported(Endpoint::Responses, Some(&stateful), None);
        assert_eq!(mask & CHAT_COMPLETIONS_ONLY_BIT, CHAT_COMPLETIONS_ONLY_BIT);
        assert_eq!(mask & Provider::Openai.protocol_bit(), 0);
        assert_eq!(
            features[CHAT_COMPLETIONS_ONLY].as_deref(),
            Some("previous_response_id")
        );
        let stateless =
            ChatRequest::parse_responses(br#"{"model":"m","input":"hi"}"#, "m", false).unwrap();
        let (mask, features) = unsupported(Endpoint::Responses, Some(&stateless), None);
        assert_eq!(mask & CHAT_COMPLETIONS_ONLY_BIT, 0);
        assert!(features[CHAT_COMPLETIONS_ONLY].is_none());
        let (mask, _) = unsupported(Endpoint::Responses, None, Some("bad"));
        assert_eq!(mask & CHAT_COMPLETIONS_ONLY_BIT, CHAT_COMPLETIONS_ONLY_BIT);
        // Chat Completions pass through to such a member.
        let (mask, _) = unsupported(Endpoint::ChatCompletions, None, None);
        assert_eq!(mask & CHAT_COMPLETIONS_ONLY_BIT, 0);
    }

    use crate::testing::channel;

    /// Plans one attempt of a request of `endpoint` with `body` towards `provider`.
    fn plan_for(
        endpoint: Endpoint,
        body: &str,
        path_model: Option<(&str, bool)>,
        provider: Provider,
        responses_api: bool,
    ) -> Result<Call, TranslateError> {
        let body = Bytes::from(body.to_owned());
        let inspected = crate::request::inspect_json_for(&body, path_model).unwrap();
        let protocol = endpoint.protocol();
        let chat = if endpoint == Endpoint::Responses {
            ChatRequest::parse_responses(&body, &inspected.model, inspected.stream).ok()
        } else if matches!(endpoint, Endpoint::Embeddings | Endpoint::Models) {
            None
        } else {
            ChatRequest::parse(protocol, &body, &inspected.model, inspected.stream).ok()
        };
        let client = ClientRequest {
            endpoint,
            inspected: &inspected,
            body: &body,
            query: Some("alt=json"),
            chat: chat.as_ref(),
        };
        plan(&client, &channel(provider, responses_api), "up-model")
    }

    fn json(bytes: &Bytes) -> serde_json::Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn the_same_protocol_passes_the_bytes_through_with_the_model_rewritten() {
        let body = r#"{"model":"alias","messages":[{"role":"user","content":"hi"}]}"#;
        let call = plan_for(
            Endpoint::ChatCompletions,
            body,
            None,
            Provider::Openai,
            true,
        )
        .unwrap();
        assert!(call.passthrough && !call.translated());
        assert_eq!(call.method, Method::POST);
        assert_eq!(call.path, "/v1/chat/completions");
        assert_eq!(call.query.as_deref(), Some("alt=json"));
        assert_eq!(
            &call.body[..],
            br#"{"model":"up-model","messages":[{"role":"user","content":"hi"}]}"#
        );
        assert_eq!(
            (call.upstream, call.client),
            (Protocol::OpenAi, Protocol::OpenAi)
        );
        assert!(!call.include_usage && !call.strip_usage_chunk && call.local.is_none());

        // An OpenAI stream that did not ask for usage is asked for it, and the chunk is kept
        // from the client; other endpoints' streams are not changed.
        let stream = r#"{"model":"alias","stream":true,"messages":[]}"#;
        let call = plan_for(
            Endpoint::ChatCompletions,
            stream,
            None,
            Provider::Openai,
            true,
        )
        .unwrap();
        assert!(call.strip_usage_chunk);
        assert_eq!(json(&call.body)["stream_options"]["include_usage"], true);
        let call = plan_for(Endpoint::Completions, stream, None, Provider::Openai, true).unwrap();
        assert!(!call.strip_usage_chunk);
        assert_eq!(call.path, "/v1/completions");
        assert!(json(&call.body).get("stream_options").is_none());

        let models = plan_for(
            Endpoint::Models,
            r#"{"model":"m"}"#,
            None,
            Provider::Openai,
            true,
        );
        assert_eq!(models.unwrap().method, Method::GET);
    }

    #[test]
    fn a_gemini_client_passes_through_on_the_models_path_with_its_body_unchanged() {
        let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        let stream = plan_for(
            Endpoint::GeminiGenerate,
            body,
            Some(("g-alias", true)),
            Provider::Gemini,
            true,
        )
        .unwrap();
        assert!(stream.passthrough);
        assert_eq!(stream.path, "/v1beta/models/up-model:streamGenerateContent");
        assert_eq!(&stream.body[..], body.as_bytes());
        assert_eq!(stream.query.as_deref(), Some("alt=json"));
        let once = plan_for(
            Endpoint::GeminiGenerate,
            body,
            Some(("g-alias", false)),
            Provider::Gemini,
            true,
        )
        .unwrap();
        assert_eq!(once.path, "/v1beta/models/up-model:generateContent");
        let count = plan_for(
            Endpoint::GeminiCountTokens,
            body,
            Some(("g-alias", false)),
            Provider::Gemini,
            true,
        )
        .unwrap();
        assert_eq!(count.path, "/v1beta/models/up-model:countTokens");
    }

    #[test]
    fn another_protocol_gets_the_request_translated_to_its_generation_endpoint() {
        let body = r#"{"model":"alias","stream_options":{"include_usage":true},"stream":true,
            "messages":[{"role":"user","content":"hi"}]}"#;
        let anthropic = plan_for(
            Endpoint::ChatCompletions,
            body,
            None,
            Provider::Anthropic,
            true,
        )
        .unwrap();
        assert!(anthropic.translated());
        assert_eq!(anthropic.method, Method::POST);
        assert_eq!(anthropic.path, "/v1/messages");
        assert_eq!(anthropic.query, None);
        assert_eq!(
            (anthropic.upstream, anthropic.client),
            (Protocol::Anthropic, Protocol::OpenAi)
        );
        assert!(anthropic.include_usage && !anthropic.strip_usage_chunk);
        let sent = json(&anthropic.body);
        assert_eq!(sent["model"], "up-model");
        assert_eq!(sent["max_tokens"], DEFAULT_ANTHROPIC_MAX_TOKENS);

        let gemini = plan_for(
            Endpoint::ChatCompletions,
            body,
            None,
            Provider::Gemini,
            true,
        )
        .unwrap();
        assert_eq!(gemini.path, "/v1beta/models/up-model:streamGenerateContent");
        assert_eq!(gemini.query.as_deref(), Some("alt=sse"));
        let once = r#"{"model":"alias","messages":[{"role":"user","content":"hi"}]}"#;
        let gemini = plan_for(
            Endpoint::ChatCompletions,
            once,
            None,
            Provider::Gemini,
            true,
        );
        let gemini = gemini.unwrap();
        assert_eq!(gemini.path, "/v1beta/models/up-model:generateContent");
        assert_eq!(gemini.query, None);
        assert!(!gemini.include_usage);

        let messages =
            r#"{"model":"alias","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}"#;
        let openai = plan_for(Endpoint::Messages, messages, None, Provider::Openai, true).unwrap();
        assert_eq!(openai.path, "/v1/chat/completions");
        assert_eq!(json(&openai.body)["model"], "up-model");
    }

    #[test]
    fn counting_tokens_goes_to_each_protocols_counter_or_is_estimated_locally() {
        let body = r#"{"model":"alias","messages":[{"role":"user","content":"hello there"}]}"#;
        let local = plan_for(
            Endpoint::MessagesCountTokens,
            body,
            None,
            Provider::Openai,
            true,
        )
        .unwrap();
        let answer = json(local.local.as_ref().unwrap());
        assert!(answer["input_tokens"].as_u64().unwrap() > 0);
        let gemini = plan_for(
            Endpoint::MessagesCountTokens,
            body,
            None,
            Provider::Gemini,
            true,
        )
        .unwrap();
        assert_eq!(gemini.path, "/v1beta/models/up-model:countTokens");
        assert!(gemini.local.is_none());
        assert!(json(&gemini.body).is_object());
        let contents = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        let anthropic = plan_for(
            Endpoint::GeminiCountTokens,
            contents,
            Some(("g", false)),
            Provider::Anthropic,
            true,
        )
        .unwrap();
        assert_eq!(anthropic.path, "/v1/messages/count_tokens");
        assert_eq!(json(&anthropic.body)["model"], "up-model");
    }

    #[test]
    fn a_responses_request_to_a_chat_only_member_goes_as_chat_completions() {
        let body = r#"{"model":"alias","input":"hi"}"#;
        let call = plan_for(Endpoint::Responses, body, None, Provider::Openai, false).unwrap();
        assert!(call.translated());
        assert_eq!(call.path, "/v1/chat/completions");
        assert_eq!(
            (call.upstream, call.client),
            (Protocol::OpenAi, Protocol::OpenAi)
        );
        assert_eq!(json(&call.body)["messages"][0]["content"], "hi");
        let native = plan_for(Endpoint::Responses, body, None, Provider::Openai, true).unwrap();
        assert!(native.passthrough);
        assert_eq!(native.path, "/v1/responses");
    }

    #[test]
    fn an_endpoint_without_a_translation_is_unsupported_elsewhere() {
        let body = r#"{"model":"alias","input":"hi"}"#;
        let err = plan_for(Endpoint::Embeddings, body, None, Provider::Anthropic, true);
        assert!(matches!(err, Err(TranslateError::Unsupported(m)) if m.contains("/v1/embeddings")));
        let bad = Bytes::from_static(br#"{"model":"alias","input":"hi"}"#);
        let inspected = crate::request::inspect_json(&bad).unwrap();
        let client = ClientRequest {
            endpoint: Endpoint::Responses,
            inspected: &inspected,
            body: &bad,
            query: None,
            chat: None,
        };
        let err = plan(&client, &channel(Provider::Openai, false), "m");
        assert!(matches!(err, Err(TranslateError::Unsupported(m)) if m.contains("/v1/responses")));
    }

    #[test]
    fn features_are_indexed_by_the_protocol_a_member_is_spoken_to_in() {
        let chat_only = channel(Provider::Openai, false);
        assert_eq!(
            feature_index(&chat_only, Protocol::OpenAi),
            CHAT_COMPLETIONS_ONLY
        );
        assert_eq!(feature_index(&chat_only, Protocol::Anthropic), 0);
        assert_eq!(
            feature_index(&channel(Provider::Openai, true), Protocol::OpenAi),
            0
        );
        assert_eq!(
            feature_index(&channel(Provider::Bedrock, true), Protocol::OpenAi),
            1
        );
        assert_eq!(
            feature_index(&channel(Provider::Vertex, true), Protocol::OpenAi),
            2
        );
        for (i, protocol) in Protocol::ALL.into_iter().enumerate() {
            assert_eq!(protocol_index(protocol), i);
            assert_eq!(
                channel_protocol(provider_of(protocol), Protocol::OpenAi),
                protocol
            );
        }
    }

    #[test]
    fn non_chat_endpoints_are_unsupported_by_other_protocols() {
        let (mask, features) = unsupported(Endpoint::Embeddings, None, None);
        assert_eq!(
            mask,
            Provider::Anthropic.protocol_bit() | Provider::Gemini.protocol_bit()
        );
        assert!(features[1]
            .as_deref()
            .is_some_and(|f| f.contains("embeddings")));
        assert!(features[0].is_none());
    }

    #[test]
    fn moderations_and_rerank_are_refused_by_other_protocols_and_azure() {
        for endpoint in [Endpoint::Moderations, Endpoint::Rerank] {
            let (mask, features) = unsupported(endpoint, None, None);
            assert_eq!(
                mask,
                Provider::Anthropic.protocol_bit() | Provider::Gemini.protocol_bit() | AZURE_BIT,
                "{endpoint:?}"
            );
            let (azure, chat_only) = (
                channel(Provider::Azure, true),
                channel(Provider::Azure, false),
            );
            assert_eq!(azure.protocol_bits() & mask, AZURE_BIT);
            assert_eq!(channel(Provider::Openai, false).protocol_bits() & mask, 0);
            assert_eq!(channel(Provider::Mock, true).protocol_bits() & mask, 0);
            for member in [&azure, &chat_only] {
                let feature = features[feature_index(member, Protocol::OpenAi)].as_deref();
                assert_eq!(
                    feature,
                    Some(format!("the {} endpoint", endpoint.path()).as_str())
                );
            }
            // A member of another protocol is never sent one.
            let body = r#"{"model":"m","query":"q","documents":["a"]}"#;
            let err = plan_for(endpoint, body, None, Provider::Anthropic, true);
            assert!(
                matches!(err, Err(TranslateError::Unsupported(m)) if m.contains(endpoint.path()))
            );
            // An OpenAI-compatible one gets the body as sent, the model rewritten.
            let call = plan_for(endpoint, body, None, Provider::Openai, true).unwrap();
            assert!(call.passthrough);
            assert_eq!(call.path, endpoint.path());
            assert_eq!(json(&call.body)["model"], "up-model");
            assert_eq!(json(&call.body)["documents"][0], "a");
        }
    }
}
