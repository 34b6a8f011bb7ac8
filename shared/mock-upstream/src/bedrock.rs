//! AWS Bedrock Runtime, as the mock speaks it: the Converse API at
//! `/model/{modelId}/converse`, `/model/{modelId}/converse-stream` (AWS's binary event stream)
//! and `/model/{modelId}/count-tokens`, the model id percent-decoded from the path.
//!
//! Every request must carry a valid AWS Signature Version 4 for service `bedrock`: the mock
//! recomputes it with the secret of the access key it names ([`TEST_ACCESS_KEY_ID`] and
//! [`TEST_ACCESS_KEY_ID_2`] are known) and refuses, before any rule applies, an unknown key
//! (403 `UnrecognizedClientException`), a wrong signature or one older than 15 minutes (403
//! `InvalidSignatureException`). Scripted errors are Bedrock's: `{"message": ...}` with the
//! exception's name in `x-amzn-ErrorType`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response, StatusCode, Uri};
use serde_json::{json, Value};
use switchyard_provider::bedrock::eventstream::encode;
use switchyard_sim as sim;
use switchyard_upstream::bedrock::{
    parse_amz_date, parse_authorization, parse_aws_keys, Authorization,
};

use crate::respond::{full, script_answer, stream_chunks, with_headers, MockBody};
use crate::script::{Behavior, RecordedRequest, ReportedUsage};

/// The access key id of the mock's first test key (throwaway; it signs nothing real).
pub const TEST_ACCESS_KEY_ID: &str = "AKIAMOCKBEDROCK00001";
/// Its secret access key.
pub const TEST_SECRET_ACCESS_KEY: &str = "mockBedrockSecret/0001+ThrowawayTestKeyXYZ";
/// The access key id of the mock's second test key.
pub const TEST_ACCESS_KEY_ID_2: &str = "AKIAMOCKBEDROCK00002";
/// Its secret access key.
pub const TEST_SECRET_ACCESS_KEY_2: &str = "mockBedrockSecret/0002+ThrowawayTestKeyXYZ";
/// How far a signature's time may be from the mock's clock.
const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

/// A Bedrock credential's secret (the JSON the gateway takes) for `access_key_id` and
/// `secret_access_key`, with a `region` when given.
pub fn credential_json(
    access_key_id: &str,
    secret_access_key: &str,
    region: Option<&str>,
) -> String {
    let mut v = json!({"access_key_id": access_key_id, "secret_access_key": secret_access_key});
    if let Some(region) = region {
        v["region"] = json!(region);
    }
    v.to_string()
}

/// The operation a Bedrock path asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Converse,
    ConverseStream,
    CountTokens,
}

/// A Bedrock path: the model id (percent-decoded) and the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BedrockPath {
    pub model: String,
    pub operation: Operation,
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `/model/{modelId}/{converse|converse-stream|count-tokens}` (after any prefix).
pub fn parse(path: &str) -> Option<BedrockPath> {
    let at = path.find("/model/")?;
    let rest = &path[at + "/model/".len()..];
    let (model, operation) = rest.rsplit_once('/')?;
    let operation = match operation {
        "converse" => Operation::Converse,
        "converse-stream" => Operation::ConverseStream,
        "count-tokens" => Operation::CountTokens,
        _ => return None,
    };
    let model = percent_decode(model)?;
    (!model.is_empty() && !model.contains('/')).then_some(BedrockPath { model, operation })
}

/// The access key id a request's `Authorization` names.
pub fn access_key_id(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    parse_authorization(value).map(|a| a.access_key_id)
}

fn secret_of(access_key_id: &str) -> Option<&'static str> {
    match access_key_id {
        TEST_ACCESS_KEY_ID => Some(TEST_SECRET_ACCESS_KEY),
        TEST_ACCESS_KEY_ID_2 => Some(TEST_SECRET_ACCESS_KEY_2),
        _ => None,
    }
}

static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

fn request_id() -> String {
    let n = REQUEST_IDS.fetch_add(1, Ordering::Relaxed);
    format!("0a1b2c3d-0000-4000-8000-{n:012}")
}

/// Bedrock's error answer: `{"message": ...}`, the exception in `x-amzn-ErrorType`.
pub fn error(status: StatusCode, exception: &str, message: &str) -> Response<MockBody> {
    error_with_body(status, exception, json!({"message": message}).to_string())
}

fn error_with_body(status: StatusCode, exception: &str, body: String) -> Response<MockBody> {
    let mut response = full(status, "application/json", body);
    if let Ok(value) =
        format!("{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/").parse()
    {
        response.headers_mut().insert("x-amzn-errortype", value);
    }
    if let Ok(value) = request_id().parse() {
        response.headers_mut().insert("x-amzn-requestid", value);
    }
    response
}

/// The exception Bedrock answers `status` with.
pub fn exception_of(status: u16) -> &'static str {
    match status {
        400 => "ValidationException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        s if s >= 500 => "InternalServerException",
        _ => "ValidationException",
    }
}

/// Checks the request's SigV4 signature: `Err` is the refusal to send.
pub fn verify(
    method: &http::Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), Box<Response<MockBody>>> {
    let (auth, secret) = signer(headers)?;
    let refuse = |message: &str| {
        Box::new(error(
            StatusCode::FORBIDDEN,
            "InvalidSignatureException",
            message,
        ))
    };
    if auth.service != "bedrock" {
        return Err(refuse(
            "Credential should be scoped to correct service: 'bedrock'.",
        ));
    }
    let date = signed_at(headers).map_err(refuse)?;
    let expected =
        expected_signature(method, uri, headers, body, &auth, secret, date).map_err(refuse)?;
    match expected {
        Some(expected)
            if expected.signature == auth.signature
                && expected.signed_headers == auth.signed_headers =>
        {
            Ok(())
        }
        _ => Err(refuse("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")),
    }
}

/// The request's parsed `Authorization` and the secret of the test key it names; `Err` is
/// Bedrock's refusal of a request without one or naming an unknown key.
fn signer(headers: &HeaderMap) -> Result<(Authorization, &'static str), Box<Response<MockBody>>> {
    let Some(auth) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_authorization)
    else {
        return Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "MissingAuthenticationTokenException",
            "Missing Authentication Token",
        )));
    };
    let Some(secret) = secret_of(&auth.access_key_id) else {
        return Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        )));
    };
    Ok((auth, secret))
}

/// The signature's time (`x-amz-date`), refused when missing or further than [`MAX_SKEW`] from
/// the mock's clock.
fn signed_at(headers: &HeaderMap) -> Result<SystemTime, &'static str> {
    let date = headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_amz_date)
        .ok_or("The request must carry an x-amz-date header.")?;
    let now = SystemTime::now();
    let skew = now
        .duration_since(date)
        .or_else(|_| date.duration_since(now))
        .unwrap_or_default();
    if skew > MAX_SKEW {
        return Err("Signature expired.");
    }
    Ok(date)
}

/// The `Authorization` the mock computes for the request with `secret` (its signed headers
/// copied, signed at `date`); `Err` is why it could not be computed.
fn expected_signature(
    method: &http::Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    auth: &Authorization,
    secret: &str,
    date: SystemTime,
) -> Result<Option<Authorization>, &'static str> {
    let mut copy = signed_copy(method, uri, headers, &auth.signed_headers)?;
    let mut keys = json!({"access_key_id": auth.access_key_id, "secret_access_key": secret});
    if let Some(token) = headers
        .get("x-amz-security-token")
        .and_then(|v| v.to_str().ok())
    {
        keys["session_token"] = json!(token);
    }
    let keys = parse_aws_keys(&keys.to_string()).map_err(|_| "The security token is not valid.")?;
    switchyard_upstream::bedrock::sign_request(&mut copy, &auth.region, &keys, body, date)
        .map_err(|_| "The request could not be verified.")?;
    Ok(copy
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_authorization))
}

/// A copy of the request as it was signed: method, URL and the `signed` headers the signer adds
/// none of.
fn signed_copy(
    method: &http::Method,
    uri: &Uri,
    headers: &HeaderMap,
    signed: &[String],
) -> Result<Request<()>, &'static str> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut copy = Request::builder()
        .method(method.clone())
        .uri(format!("http://{host}{path_and_query}"))
        .body(())
        .map_err(|_| "The request URI is not valid.")?;
    for name in signed {
        if matches!(
            name.as_str(),
            "host" | "x-amz-date" | "x-amz-security-token" | "authorization"
        ) {
            continue;
        }
        match (
            headers.get(name.as_str()),
            http::HeaderName::from_bytes(name.as_bytes()),
        ) {
            (Some(value), Ok(name)) => {
                copy.headers_mut().insert(name, value.clone());
            }
            _ => return Err("A signed header is missing."),
        }
    }
    Ok(copy)
}

fn usage_json(answer: &sim::Answer) -> Value {
    let input = answer.input_tokens().saturating_sub(answer.cached_tokens);
    let output = answer.output_tokens();
    let mut usage = json!({
        "inputTokens": input,
        "outputTokens": output,
        "totalTokens": input + output + answer.cached_tokens,
    });
    if answer.cached_tokens > 0 {
        usage["cacheReadInputTokens"] = json!(answer.cached_tokens);
    }
    usage
}

fn stop_reason(answer: &sim::Answer) -> &'static str {
    if answer.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

/// The `Converse` answer saying `answer`.
pub fn converse_json(answer: &sim::Answer) -> String {
    let mut content = Vec::new();
    if !answer.text.is_empty() {
        content.push(json!({"text": answer.text}));
    }
    for call in &answer.tool_calls {
        content.push(json!({"toolUse": {
            "toolUseId": format!("tooluse_mock{}", sim::next_id()),
            "name": call.name,
            "input": call.arguments_object(),
        }}));
    }
    json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason(answer),
        "usage": usage_json(answer),
        "metrics": {"latencyMs": 1},
    })
    .to_string()
}

fn event(kind: &str, payload: &Value) -> Bytes {
    Bytes::from(encode(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    ))
}

/// `ConverseStream`'s event-stream messages saying `answer`, text and each tool's input in up
/// to `n` deltas: `messageStart`, per block (`contentBlockStart` for a tool)
/// `contentBlockDelta`s and `contentBlockStop`, `messageStop`, `metadata` (usage).
pub fn converse_stream(answer: &sim::Answer, n: usize) -> Vec<Bytes> {
    let mut events = vec![event("messageStart", &json!({"role": "assistant"}))];
    let mut index = 0;
    if !answer.text.is_empty() {
        for piece in sim::split_content(&answer.text, n) {
            events.push(event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": index, "delta": {"text": piece}}),
            ));
        }
        events.push(event(
            "contentBlockStop",
            &json!({"contentBlockIndex": index}),
        ));
        index += 1;
    }
    for call in &answer.tool_calls {
        events.push(event(
            "contentBlockStart",
            &json!({"contentBlockIndex": index, "start": {"toolUse": {
                "toolUseId": format!("tooluse_mock{}", sim::next_id()), "name": call.name}}}),
        ));
        for piece in sim::split_even(&call.arguments, n) {
            events.push(event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}),
            ));
        }
        events.push(event(
            "contentBlockStop",
            &json!({"contentBlockIndex": index}),
        ));
        index += 1;
    }
    events.push(event(
        "messageStop",
        &json!({"stopReason": stop_reason(answer)}),
    ));
    events.push(event(
        "metadata",
        &json!({"usage": usage_json(answer), "metrics": {"latencyMs": 1}}),
    ));
    events
}

/// The response to a (verified) Bedrock request following `behavior` (the default answer when
/// `None`), its extra headers included, and the usage it reports.
pub(crate) fn respond(
    request: &RecordedRequest,
    route: &BedrockPath,
    behavior: Option<&Behavior>,
) -> (Response<MockBody>, Option<ReportedUsage>) {
    let default = Behavior::ok();
    let behavior = behavior.unwrap_or(&default);
    let mut reported = None;
    let response = answer(request, route, behavior, &mut reported);
    (with_headers(response, behavior), reported)
}

fn answer(
    request: &RecordedRequest,
    route: &BedrockPath,
    behavior: &Behavior,
    reported: &mut Option<ReportedUsage>,
) -> Response<MockBody> {
    if let Some(response) = scripted(behavior) {
        return response;
    }
    let status = behavior
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let prompt_tokens = sim::estimate_tokens(&String::from_utf8_lossy(&request.body)).max(1);
    let answer = script_answer(behavior, &route.model, prompt_tokens);
    let streamed = route.operation == Operation::ConverseStream
        || (route.operation == Operation::Converse
            && (behavior.stream.is_some() || behavior.cut_after_chunks.is_some()));
    let mut response = if route.operation == Operation::CountTokens {
        full(
            status,
            "application/json",
            json!({"inputTokens": prompt_tokens}).to_string(),
        )
    } else if streamed {
        stream_answer(&answer, behavior, status, reported)
    } else {
        *reported = Some(ReportedUsage::of(&answer));
        full(status, "application/json", converse_json(&answer))
    };
    if let Ok(value) = request_id().parse() {
        response.headers_mut().insert("x-amzn-requestid", value);
    }
    response
}

/// The answers a behaviour scripts whatever the operation: a malformed body, an error status
/// (Bedrock's exception for it, with the scripted body or a message), or a fixed body; `None`
/// for a generated answer.
fn scripted(behavior: &Behavior) -> Option<Response<MockBody>> {
    let status = behavior.status.and_then(|s| StatusCode::from_u16(s).ok());
    if behavior.malformed {
        return Some(full(
            status.unwrap_or(StatusCode::OK),
            "application/json",
            "{\"output\":{\"message\":<<mock: malformed>>",
        ));
    }
    if let Some(status) = status.filter(|s| !s.is_success()) {
        let exception = exception_of(status.as_u16());
        let body = behavior.body.clone().unwrap_or_else(|| {
            json!({"message": format!("mock upstream scripted error (HTTP {})", status.as_u16())})
                .to_string()
        });
        return Some(error_with_body(status, exception, body));
    }
    let status = status.unwrap_or(StatusCode::OK);
    let body = behavior.body.as_ref()?;
    Some(full(status, "application/json", body.clone()))
}

/// `ConverseStream`'s answer saying `answer` in the behaviour's chunks and gap, cut short or
/// ended by a scripted exception where it says (neither reports usage).
fn stream_answer(
    answer: &sim::Answer,
    behavior: &Behavior,
    status: StatusCode,
    reported: &mut Option<ReportedUsage>,
) -> Response<MockBody> {
    let gap = behavior.stream.map(|s| s.gap).unwrap_or_default();
    let mut events = converse_stream(answer, stream_chunks(behavior));
    *reported = Some(ReportedUsage::of(answer));
    let cut = behavior.cut_after_chunks.is_some();
    if let Some(n) = behavior.cut_after_chunks {
        *reported = None;
        events.truncate(n.min(events.len().saturating_sub(2)));
    }
    if let Some((n, exception)) = &behavior.exception_after_chunks {
        *reported = None;
        events.truncate((*n).min(events.len().saturating_sub(2)));
        events.push(exception_event(exception));
    }
    Response::builder()
        .status(status)
        .header(
            header::CONTENT_TYPE,
            switchyard_upstream::bedrock::EVENT_STREAM,
        )
        .body(MockBody::events(events, gap, cut))
        .unwrap_or_else(|_| {
            full(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                "bad response",
            )
        })
}

/// An event-stream exception message: Bedrock's way to fail a stream already under way.
fn exception_event(exception: &str) -> Bytes {
    Bytes::from(encode(
        &[
            (":exception-type", exception),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json!({"message": format!("mock upstream scripted {exception}")})
            .to_string()
            .as_bytes(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse() {
        assert_eq!(
            parse("/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"),
            Some(BedrockPath {
                model: "anthropic.claude-3-5-haiku-20241022-v1:0".into(),
                operation: Operation::ConverseStream
            })
        );
        assert_eq!(
            parse("/model/m/count-tokens").unwrap().operation,
            Operation::CountTokens
        );
        assert_eq!(parse("/model/m/invoke"), None);
        assert_eq!(parse("/v1/messages"), None);
        assert_eq!(exception_of(429), "ThrottlingException");
    }
}
