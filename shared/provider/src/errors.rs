//! Error bodies in each protocol's shape, and the status mappings between them.

use serde_json::{json, Value};

use crate::protocol::Protocol;
use crate::util::{get_str, parse_json_lenient, truncate, value_text};

/// Upstream error messages are cut to this many characters before being re-rendered.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 1000;

/// The OpenAI error `type` for an HTTP status.
pub fn openai_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

/// The Anthropic error `type` for an HTTP status.
pub fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The Gemini (google.rpc) `status` for an HTTP status code.
pub fn gemini_error_status(code: u16) -> &'static str {
    match code {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 | 529 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        s if s >= 500 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

/// The HTTP status to give a `client` for an upstream status: Anthropic's non-standard 529
/// (overloaded) becomes 503 for OpenAI and Gemini clients; everything else is kept.
pub fn translate_status(client: Protocol, status: u16) -> u16 {
    if status == 529 && client != Protocol::Anthropic {
        503
    } else {
        status
    }
}

/// A gateway-generated error body in `protocol`'s shape. `openai_type`/`code` are the OpenAI
/// `type`/`code` (e.g. `"invalid_request_error"`, `"model_not_found"`); Anthropic and Gemini
/// bodies derive their type/status from `status`.
pub fn gateway_error_body(
    protocol: Protocol,
    status: u16,
    openai_type: &str,
    code: &str,
    message: &str,
) -> String {
    let code = (!code.is_empty()).then_some(code);
    render(protocol, status, message, Some(openai_type), code)
}

fn render(
    protocol: Protocol,
    status: u16,
    message: &str,
    openai_type: Option<&str>,
    code: Option<&str>,
) -> String {
    let v = match protocol {
        Protocol::OpenAi => json!({"error": {
            "message": message,
            "type": openai_type.unwrap_or_else(|| openai_error_type(status)),
            "param": Value::Null,
            "code": code,
        }}),
        Protocol::Anthropic => json!({
            "type": "error",
            "error": {"type": anthropic_error_type(status), "message": message},
        }),
        Protocol::Gemini => json!({"error": {
            "code": status,
            "message": message,
            "status": gemini_error_status(status),
        }}),
    };
    v.to_string()
}

/// The message and machine-readable kind (Anthropic `error.type`, Gemini `error.status`, OpenAI
/// `error.code`/`error.type`) of an error body of any of the three shapes, or its text.
fn extract(body: &[u8]) -> (String, Option<String>) {
    if let Some(v) = parse_json_lenient(body) {
        let err = v.get("error").unwrap_or(&v);
        let message = match err {
            Value::String(s) => Some(s.clone()),
            _ => get_str(err, "message")
                .or_else(|| get_str(&v, "message"))
                .or_else(|| get_str(&v, "detail"))
                .map(str::to_string),
        };
        let kind = get_str(err, "status")
            .or_else(|| get_str(err, "code"))
            .or_else(|| get_str(err, "type"))
            .map(str::to_string);
        if let Some(m) = message {
            return (m, kind);
        }
        if let Value::Array(items) = &v {
            // Gemini sometimes answers with a one-element array of errors.
            if let Some(first) = items.first() {
                return extract(first.to_string().as_bytes());
            }
        }
        return (value_text(&v), kind);
    }
    let prefix = &body[..body.len().min(4 * MAX_ERROR_MESSAGE_CHARS)];
    (String::from_utf8_lossy(prefix).trim().to_string(), None)
}

/// The message of an upstream error body of any of the three shapes (or its text), cut to
/// [`MAX_ERROR_MESSAGE_CHARS`]: what the upstream said, for the gateway's own log.
pub fn error_message(body: &[u8]) -> String {
    truncate(&extract(body).0, MAX_ERROR_MESSAGE_CHARS)
}

/// An upstream error body (in `upstream`'s shape, or any text) re-rendered in `client`'s shape:
/// the type/status follow `status`, the message is the upstream's (cut to
/// [`MAX_ERROR_MESSAGE_CHARS`]). Same protocol in and out is the caller's passthrough, but
/// works here too (re-rendered).
pub fn translate_error_body(
    upstream: Protocol,
    client: Protocol,
    status: u16,
    body: &[u8],
) -> String {
    let (message, kind) = extract(body);
    let message = if message.is_empty() {
        format!("upstream {} error (HTTP {status})", upstream.as_str())
    } else {
        truncate(&message, MAX_ERROR_MESSAGE_CHARS)
    };
    render(
        client,
        translate_status(client, status),
        &message,
        None,
        kind.as_deref(),
    )
}

/// A gateway-made mid-stream error event in `client`'s SSE form, its data the same body as
/// [`gateway_error_body`] gives (OpenAI: `data: {"error":{...}}`; Anthropic: `event: error`;
/// Gemini: `data: {"error":{"code","message","status"}}`).
pub fn gateway_stream_error_event(
    protocol: Protocol,
    status: u16,
    openai_type: &str,
    code: &str,
    message: &str,
) -> String {
    let body = gateway_error_body(protocol, status, openai_type, code, message);
    match protocol {
        Protocol::Anthropic => format!("event: error\ndata: {body}\n\n"),
        Protocol::OpenAi | Protocol::Gemini => format!("data: {body}\n\n"),
    }
}

/// A mid-stream error event in `client`'s SSE form.
pub fn stream_error_event(client: Protocol, message: &str) -> String {
    let message = truncate(message, MAX_ERROR_MESSAGE_CHARS);
    match client {
        Protocol::OpenAi => format!(
            "data: {}\n\n",
            json!({"error": {"message": message, "type": "server_error", "param": Value::Null, "code": Value::Null}})
        ),
        Protocol::Anthropic => format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": "api_error", "message": message}})
        ),
        Protocol::Gemini => format!(
            "data: {}\n\n",
            json!({"error": {"code": 500, "message": message, "status": "INTERNAL"}})
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn j(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn an_upstream_message_is_kept_whole_up_to_its_bound_and_cut_beyond() {
        let body = |said: &str| json!({"error": {"message": said}}).to_string();
        for n in [MAX_ERROR_MESSAGE_CHARS - 1, MAX_ERROR_MESSAGE_CHARS] {
            let said = "é".repeat(n);
            assert_eq!(
                error_message(body(&said).as_bytes()),
                said,
                "{n} characters"
            );
        }
        let said = "é".repeat(MAX_ERROR_MESSAGE_CHARS + 1);
        assert_eq!(
            error_message(body(&said).as_bytes()),
            format!("{}…", "é".repeat(MAX_ERROR_MESSAGE_CHARS))
        );
    }

    #[test]
    fn openai_type_per_status() {
        for (s, t) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (422, "invalid_request_error"),
            (429, "rate_limit_error"),
            (500, "server_error"),
            (503, "server_error"),
        ] {
            assert_eq!(openai_error_type(s), t, "{s}");
        }
    }

    #[test]
    fn anthropic_type_per_status() {
        for (s, t) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (402, "billing_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (502, "api_error"),
            (503, "overloaded_error"),
            (504, "timeout_error"),
            (529, "overloaded_error"),
        ] {
            assert_eq!(anthropic_error_type(s), t, "{s}");
        }
    }

    #[test]
    fn gemini_status_per_code() {
        for (s, t) in [
            (400, "INVALID_ARGUMENT"),
            (401, "UNAUTHENTICATED"),
            (403, "PERMISSION_DENIED"),
            (404, "NOT_FOUND"),
            (409, "ABORTED"),
            (418, "FAILED_PRECONDITION"),
            (429, "RESOURCE_EXHAUSTED"),
            (499, "CANCELLED"),
            (500, "INTERNAL"),
            (501, "UNIMPLEMENTED"),
            (502, "INTERNAL"),
            (503, "UNAVAILABLE"),
            (504, "DEADLINE_EXCEEDED"),
        ] {
            assert_eq!(gemini_error_status(s), t, "{s}");
        }
    }

    #[test]
    fn gateway_error_bodies_per_protocol() {
        let o = j(&gateway_error_body(
            Protocol::OpenAi,
            404,
            "invalid_request_error",
            "model_not_found",
            "no such model",
        ));
        assert_eq!(o["error"]["type"], "invalid_request_error");
        assert_eq!(o["error"]["code"], "model_not_found");
        assert_eq!(o["error"]["message"], "no such model");
        assert!(o["error"]["param"].is_null());
        let a = j(&gateway_error_body(
            Protocol::Anthropic,
            404,
            "invalid_request_error",
            "model_not_found",
            "no such model",
        ));
        assert_eq!(
            a,
            json!({"type":"error","error":{"type":"not_found_error","message":"no such model"}})
        );
        let g = j(&gateway_error_body(
            Protocol::Gemini,
            429,
            "rate_limit_error",
            "",
            "slow down",
        ));
        assert_eq!(
            g,
            json!({"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}})
        );
    }

    #[test]
    fn anthropic_error_to_openai_keeps_message_and_status_meaning() {
        let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
        let o = j(&translate_error_body(
            Protocol::Anthropic,
            Protocol::OpenAi,
            429,
            body,
        ));
        assert_eq!(o["error"]["type"], "rate_limit_error");
        assert_eq!(o["error"]["code"], "rate_limit_error");
        assert!(o["error"]["message"]
            .as_str()
            .unwrap()
            .contains("per-minute"));
    }

    #[test]
    fn gemini_error_to_anthropic() {
        let body = br#"{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}"#;
        let a = j(&translate_error_body(
            Protocol::Gemini,
            Protocol::Anthropic,
            429,
            body,
        ));
        assert_eq!(
            a,
            json!({"type":"error","error":{"type":"rate_limit_error","message":"Resource has been exhausted"}})
        );
    }

    #[test]
    fn openai_error_to_gemini() {
        let body = br#"{"error":{"message":"Invalid 'messages'","type":"invalid_request_error","param":"messages","code":null}}"#;
        let g = j(&translate_error_body(
            Protocol::OpenAi,
            Protocol::Gemini,
            400,
            body,
        ));
        assert_eq!(g["error"]["code"], 400);
        assert_eq!(g["error"]["status"], "INVALID_ARGUMENT");
        assert_eq!(g["error"]["message"], "Invalid 'messages'");
    }

    #[test]
    fn gemini_array_error_body() {
        let body = br#"[{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}]"#;
        let o = j(&translate_error_body(
            Protocol::Gemini,
            Protocol::OpenAi,
            503,
            body,
        ));
        assert_eq!(o["error"]["message"], "The model is overloaded.");
        assert_eq!(o["error"]["type"], "server_error");
    }

    #[test]
    fn overloaded_529_becomes_503_for_non_anthropic_clients() {
        let body =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let g = j(&translate_error_body(
            Protocol::Anthropic,
            Protocol::Gemini,
            529,
            body,
        ));
        assert_eq!(g["error"]["code"], 503);
        assert_eq!(g["error"]["status"], "UNAVAILABLE");
        assert_eq!(translate_status(Protocol::Anthropic, 529), 529);
    }

    #[test]
    fn plain_text_and_huge_bodies_are_bounded() {
        let o = j(&translate_error_body(
            Protocol::Gemini,
            Protocol::OpenAi,
            502,
            b"<html>Bad Gateway</html>",
        ));
        assert_eq!(o["error"]["message"], "<html>Bad Gateway</html>");
        let huge = vec![b'x'; 5_000_000];
        let o = j(&translate_error_body(
            Protocol::OpenAi,
            Protocol::Anthropic,
            500,
            &huge,
        ));
        assert!(
            o["error"]["message"].as_str().unwrap().chars().count() <= MAX_ERROR_MESSAGE_CHARS + 1
        );
        let o = j(&translate_error_body(
            Protocol::OpenAi,
            Protocol::Anthropic,
            500,
            b"",
        ));
        assert!(o["error"]["message"].as_str().unwrap().contains("HTTP 500"));
        // The text is looked for in the first 4 000 bytes, past leading blanks.
        let padded = format!("{}the real words", " ".repeat(2_000));
        let o = j(&translate_error_body(
            Protocol::OpenAi,
            Protocol::Anthropic,
            500,
            padded.as_bytes(),
        ));
        assert_eq!(o["error"]["message"], "the real words");
        // An `error` that is only a string is the message.
        let o = j(&translate_error_body(
            Protocol::OpenAi,
            Protocol::Gemini,
            500,
            br#"{"error":"plain words"}"#,
        ));
        assert_eq!(o["error"]["message"], "plain words");
    }

    #[test]
    fn a_gateway_stream_error_event_carries_the_gateway_error_body_in_each_form() {
        let event = |p| {
            gateway_stream_error_event(p, 429, "rate_limit_error", "limit_reached", "slow down")
        };
        // The event's JSON, between the lines that open it and the blank line that ends it.
        let body = |e: &str, opening: &str| {
            j(e.strip_prefix(opening)
                .unwrap()
                .strip_suffix("\n\n")
                .unwrap())
        };
        let o = event(Protocol::OpenAi);
        assert_eq!(
            body(&o, "data: "),
            json!({"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"limit_reached"}})
        );
        let a = event(Protocol::Anthropic);
        assert_eq!(
            body(&a, "event: error\ndata: "),
            json!({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}})
        );
        let g = event(Protocol::Gemini);
        assert_eq!(
            body(&g, "data: "),
            json!({"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}})
        );
        // One event each: the blank line that ends it is its only one.
        for e in [o, a, g] {
            assert_eq!(e.matches("\n\n").count(), 1, "{e:?}");
        }
    }

    #[test]
    fn stream_error_events_per_protocol() {
        let o = stream_error_event(Protocol::OpenAi, "boom");
        assert!(o.starts_with("data: ") && o.ends_with("\n\n"));
        assert_eq!(
            j(o.trim_start_matches("data: ").trim())["error"]["message"],
            "boom"
        );
        let a = stream_error_event(Protocol::Anthropic, "boom");
        assert!(a.starts_with("event: error\ndata: "));
        let data = a.trim_start_matches("event: error\ndata: ").trim();
        assert_eq!(
            j(data),
            json!({"type":"error","error":{"type":"api_error","message":"boom"}})
        );
        let g = stream_error_event(Protocol::Gemini, "boom");
        assert_eq!(
            j(g.trim_start_matches("data: ").trim())["error"]["status"],
            "INTERNAL"
        );
    }
}
