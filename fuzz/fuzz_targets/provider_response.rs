//! `translate_response` for every (upstream, client) pair on one body.
//!
//! Invariants: same protocol is a byte-for-byte passthrough; a translated body is a JSON object
//! the client's own protocol reads again (translating it onward succeeds), and the usage read
//! from it is the usage reported (when every figure is within what one field may report). Usage
//! is bounded whatever the body says: each figure within `MAX_REQUEST_TOKENS`, cached tokens
//! within the input (the seeds carry figures at the extremes: `u64::MAX`, `i64::MAX`, the bound
//! and one above it, negative, fractional, strings).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_fuzz::pairs;
use switchyard_provider::{
    response_usage, translate_response, Protocol, Usage, MAX_REPORTED_TOKENS, MAX_REQUEST_TOKENS,
};

fn check_bounds(usage: Usage, what: &str) {
    assert!(
        usage.input_tokens <= MAX_REQUEST_TOKENS
            && usage.output_tokens <= MAX_REQUEST_TOKENS
            && usage.cached_tokens <= usage.input_tokens,
        "{what}: usage out of bounds: {usage:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    for protocol in Protocol::ALL {
        check_bounds(response_usage(protocol, data), "response_usage");
    }
    for (upstream, client) in pairs() {
        let Ok((out, usage)) = translate_response(upstream, client, data, "client-model") else {
            continue;
        };
        if upstream == client {
            assert_eq!(out, data, "{upstream} passthrough changed the body");
            continue;
        }
        let text = String::from_utf8_lossy(&out);
        let value: serde_json::Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{upstream}→{client} is not JSON ({e}): {text}"));
        assert!(value.is_object(), "{upstream}→{client}: {text}");
        for next in Protocol::ALL {
            if next != client {
                if let Err(e) = translate_response(client, next, &out, "m") {
                    panic!("{upstream}→{client} output is not a {client} response ({e}): {text}");
                }
            }
        }
        check_bounds(usage, &format!("{upstream}→{client}"));
        // A neutral figure above what one field may report (Anthropic's input adds three
        // fields, Gemini's output two) is not read back from one field: no exact round trip.
        if usage.input_tokens > MAX_REPORTED_TOKENS || usage.output_tokens > MAX_REPORTED_TOKENS {
            continue;
        }
        assert_eq!(
            response_usage(client, &out),
            usage,
            "{upstream}→{client} usage: {text}"
        );
    }
});
