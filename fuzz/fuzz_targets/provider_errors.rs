//! `translate_error_body` for every pair and several statuses, and
//! `parse_count_tokens_response` for every protocol.
//!
//! Invariants: a translated error is a JSON object whose message is at most
//! `MAX_ERROR_MESSAGE_CHARS` characters (plus an ellipsis) and survives a second translation
//! unchanged; a count-tokens answer rendered by `count_tokens_response` parses back to its count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use switchyard_fuzz::{pairs, seed};
use switchyard_provider::{
    count_tokens_response, parse_count_tokens_response, translate_error_body, Protocol,
    MAX_ERROR_MESSAGE_CHARS,
};

fn message(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    assert!(v.is_object(), "{body}");
    match v.pointer("/error/message") {
        Some(Value::String(m)) => m.clone(),
        other => panic!("no error.message ({other:?}): {body}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let h = seed(data);
    let statuses = [400, 401, 404, 429, 500, 503, 529, (h % 1000) as u16];
    let status = statuses[(h >> 32) as usize % statuses.len()];
    for (upstream, client) in pairs() {
        let out = translate_error_body(upstream, client, status, data);
        let first = message(&out);
        assert!(
            first.chars().count() <= MAX_ERROR_MESSAGE_CHARS + 1,
            "{upstream}→{client}: message of {} characters",
            first.chars().count()
        );
        let again = translate_error_body(client, client, status, out.as_bytes());
        assert_eq!(
            message(&again),
            first,
            "{upstream}→{client} then {client}→{client}"
        );
    }
    for protocol in Protocol::ALL {
        let _ = parse_count_tokens_response(protocol, data);
        let n = h >> 8;
        assert_eq!(
            parse_count_tokens_response(protocol, count_tokens_response(protocol, n).as_bytes()),
            Some(n)
        );
    }
});
