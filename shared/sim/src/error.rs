//! Errors in each provider's own shape, and the protocol whose shape a request path expects.

use serde_json::json;

/// The three wire protocols the simulator speaks natively.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// OpenAI and OpenAI-compatible paths (`/v1/chat/completions`, `/v1/embeddings`, ...).
    OpenAi,
    /// Anthropic Messages: `/v1/messages` and `/v1/messages/...`.
    Anthropic,
    /// Gemini native: `/v1beta/...`.
    Gemini,
}

impl Protocol {
    /// The protocol whose shapes (answers and errors) a request to `path` expects.
    pub fn of_path(path: &str) -> Self {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            Self::Anthropic
        } else if path.starts_with("/v1beta/") || path.contains("/publishers/google/models/") {
            Self::Gemini
        } else {
            Self::OpenAi
        }
    }
}

/// An error body for HTTP `status` in `protocol`'s shape, its type/code/status derived from the
/// status ([`openai_error_kind`], [`anthropic_error_kind`], [`gemini_error_status`]).
pub fn error_json(protocol: Protocol, status: u16, message: &str) -> String {
    match protocol {
        Protocol::OpenAi => {
            let (kind, code) = openai_error_kind(status);
            openai_error_json(message, kind, code)
        }
        Protocol::Anthropic => anthropic_error_json(message, anthropic_error_kind(status)),
        Protocol::Gemini => gemini_error_json(status, message, gemini_error_status(status)),
    }
}

/// `{"error":{"message","type","code"}}`, the OpenAI error shape.
pub fn openai_error_json(message: &str, error_type: &str, code: &str) -> String {
    json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
        .to_string()
}

/// `{"type":"error","error":{"type","message"}}`, the Anthropic error shape.
pub fn anthropic_error_json(message: &str, error_type: &str) -> String {
    json!({"type": "error", "error": {"type": error_type, "message": message}}).to_string()
}

/// `{"error":{"code","message","status"}}`, the Gemini (Google API) error shape.
pub fn gemini_error_json(code: u16, message: &str, status: &str) -> String {
    json!({"error": {"code": code, "message": message, "status": status}}).to_string()
}

/// The (type, code) an OpenAI-style upstream uses for an HTTP status.
pub fn openai_error_kind(status: u16) -> (&'static str, &'static str) {
    match status {
        400 => ("invalid_request_error", "invalid_request"),
        401 => ("invalid_request_error", "invalid_api_key"),
        403 => ("permission_error", "permission_denied"),
        404 => ("invalid_request_error", "model_not_found"),
        408 => ("timeout_error", "request_timeout"),
        409 => ("invalid_request_error", "conflict"),
        413 => ("invalid_request_error", "request_too_large"),
        422 => ("invalid_request_error", "unprocessable_entity"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        500..=599 => ("server_error", "server_error"),
        _ => ("api_error", "upstream_error"),
    }
}

/// The Anthropic error `type` for an HTTP status.
pub fn anthropic_error_kind(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The Google RPC status name Gemini reports with an HTTP status.
pub fn gemini_error_status(code: u16) -> &'static str {
    match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        408 | 504 => "DEADLINE_EXCEEDED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        502 | 503 | 529 => "UNAVAILABLE",
        c if (400..500).contains(&c) => "FAILED_PRECONDITION",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::models_json;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn errors_follow_the_protocol_of_the_path() {
        assert_eq!(Protocol::of_path("/v1/chat/completions"), Protocol::OpenAi);
        assert_eq!(Protocol::of_path("/v1/messages"), Protocol::Anthropic);
        assert_eq!(
            Protocol::of_path("/v1/messages/count_tokens"),
            Protocol::Anthropic
        );
        assert_eq!(Protocol::of_path("/v1/messagesx"), Protocol::OpenAi);
        assert_eq!(
            Protocol::of_path("/v1beta/models/g:generateContent"),
            Protocol::Gemini
        );
        let o = parse(&error_json(Protocol::OpenAi, 429, "m"));
        assert_eq!(o["error"]["type"], "rate_limit_error");
        let a = parse(&error_json(Protocol::Anthropic, 529, "m"));
        assert_eq!(a["error"]["type"], "overloaded_error");
        let g = parse(&error_json(Protocol::Gemini, 429, "m"));
        assert_eq!(g["error"]["code"], 429);
        assert_eq!(g["error"]["status"], "RESOURCE_EXHAUSTED");
    }

    #[test]
    fn vertex_publisher_paths_are_gemini() {
        assert_eq!(
            Protocol::of_path(
                "/v1/projects/p/locations/l/publishers/google/models/g:generateContent"
            ),
            Protocol::Gemini
        );
        assert_eq!(Protocol::of_path("/v1/models/g"), Protocol::OpenAi);
    }

    #[test]
    fn every_status_has_its_openai_and_anthropic_error_kind() {
        for (status, kind) in [
            (400, ("invalid_request_error", "invalid_request")),
            (401, ("invalid_request_error", "invalid_api_key")),
            (403, ("permission_error", "permission_denied")),
            (404, ("invalid_request_error", "model_not_found")),
            (408, ("timeout_error", "request_timeout")),
            (409, ("invalid_request_error", "conflict")),
            (413, ("invalid_request_error", "request_too_large")),
            (422, ("invalid_request_error", "unprocessable_entity")),
            (429, ("rate_limit_error", "rate_limit_exceeded")),
            (500, ("server_error", "server_error")),
            (599, ("server_error", "server_error")),
            (418, ("api_error", "upstream_error")),
            (600, ("api_error", "upstream_error")),
        ] {
            assert_eq!(openai_error_kind(status), kind, "{status}");
        }
        for (status, kind) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (529, "overloaded_error"),
            (500, "api_error"),
        ] {
            assert_eq!(anthropic_error_kind(status), kind, "{status}");
        }
        let o = parse(&error_json(Protocol::OpenAi, 401, "no"));
        assert_eq!(o["error"]["code"], "invalid_api_key");
        assert_eq!(o["error"]["message"], "no");
        assert_eq!(o["error"]["param"], Value::Null);
        let a = parse(&error_json(Protocol::Anthropic, 404, "gone"));
        assert_eq!(a["error"]["message"], "gone");
        let g = parse(&error_json(Protocol::Gemini, 503, "later"));
        assert_eq!(g["error"]["message"], "later");
    }

    #[test]
    fn every_status_has_its_gemini_error_status() {
        for (code, status) in [
            (400, "INVALID_ARGUMENT"),
            (401, "UNAUTHENTICATED"),
            (403, "PERMISSION_DENIED"),
            (404, "NOT_FOUND"),
            (408, "DEADLINE_EXCEEDED"),
            (504, "DEADLINE_EXCEEDED"),
            (409, "ABORTED"),
            (429, "RESOURCE_EXHAUSTED"),
            (499, "CANCELLED"),
            (500, "INTERNAL"),
            (501, "UNIMPLEMENTED"),
            (502, "UNAVAILABLE"),
            (503, "UNAVAILABLE"),
            (529, "UNAVAILABLE"),
            (418, "FAILED_PRECONDITION"),
            (300, "UNKNOWN"),
            (599, "UNKNOWN"),
        ] {
            assert_eq!(gemini_error_status(code), status, "{code}");
        }
    }

    #[test]
    fn models_and_errors_have_their_shapes() {
        let v = parse(&models_json(&["a", "b"]));
        assert_eq!(v["data"][1]["id"], "b");
        assert_eq!(v["data"][1]["object"], "model");
        let e = parse(&openai_error_json("boom", "server_error", "server_error"));
        assert_eq!(e["error"]["message"], "boom");
        assert_eq!(e["error"]["type"], "server_error");
        assert_eq!(e["error"]["code"], "server_error");
        let a = parse(&anthropic_error_json("slow down", "rate_limit_error"));
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "rate_limit_error");
    }
}
