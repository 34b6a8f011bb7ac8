//! `translate_response` for every (upstream, client) pair on one body.
//!
//! Invariants: same protocol is a byte-for-byte passthrough; a translated body is a JSON object
//! the client's own protocol reads again (translating it onward succeeds), and the usage read
//! from it is the usage reported (when the upstream's cached count is within its input count).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_fuzz::pairs;
use switchyard_provider::{response_usage, translate_response, Protocol};

fuzz_target!(|data: &[u8]| {
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
        // Only an upstream whose cached count is part of its input count (as every protocol
        // defines it) can be carried over exactly: Anthropic's `input_tokens` excludes the cache.
        if usage.cached_tokens > usage.input_tokens {
            continue;
        }
        assert_eq!(
            response_usage(client, &out),
            usage,
            "{upstream}→{client} usage: {text}"
        );
    }
});
