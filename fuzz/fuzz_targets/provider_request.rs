//! `ChatRequest::parse` for each protocol, then `unsupported_for`, `to_body` and
//! `to_count_tokens_body` for each target on what parsed.
//!
//! Invariants: the same protocol is never unsupported; `to_body` fails with `Unsupported` only
//! when `unsupported_for` said so; every rendered body parses again in the target's protocol
//! with the upstream model and the stream flag; a count-tokens body parses again too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_fuzz::seed;
use switchyard_provider::{ChatRequest, Protocol, TranslateError};

const UPSTREAM: &str = "upstream-model";

fn reparse(target: Protocol, body: &[u8], stream: bool, what: &str) -> ChatRequest {
    // For Gemini the model comes from the URL; for the others it must be in the body.
    let url_model = if target == Protocol::Gemini {
        UPSTREAM
    } else {
        ""
    };
    match ChatRequest::parse(target, body, url_model, stream) {
        Ok(req) => req,
        Err(e) => panic!(
            "{what} for {target} does not parse again: {e}\n{}",
            String::from_utf8_lossy(body)
        ),
    }
}

fuzz_target!(|data: &[u8]| {
    let stream_arg = seed(data) & 1 == 1;
    for protocol in Protocol::ALL {
        let Ok(req) = ChatRequest::parse(protocol, data, "client-model", stream_arg) else {
            continue;
        };
        assert_eq!(req.protocol(), protocol);
        let _ = req.estimate_input_tokens();
        for target in Protocol::ALL {
            let unsupported = req.unsupported_for(target);
            if target == protocol {
                assert!(unsupported.is_none(), "{protocol} unsupported for itself");
            }
            match req.to_body(target, UPSTREAM, 4096) {
                Ok(body) => {
                    assert!(
                        unsupported.is_none(),
                        "{protocol}→{target} rendered although unsupported: {unsupported:?}"
                    );
                    let what = format!("the {protocol}→{target} body");
                    let again = reparse(target, &body, req.stream(), &what);
                    assert_eq!(again.model(), UPSTREAM, "{what}");
                    assert_eq!(again.stream(), req.stream(), "{what}");
                }
                Err(TranslateError::Unsupported(feature)) => assert!(
                    unsupported.is_some(),
                    "{protocol}→{target}: to_body says unsupported ({feature}) but unsupported_for does not"
                ),
                Err(TranslateError::Malformed(_)) => {}
            }
            if let Ok(body) = req.to_count_tokens_body(target, UPSTREAM) {
                assert_ne!(target, Protocol::OpenAi);
                let what = format!("the {protocol}→{target} count-tokens body");
                let again = reparse(target, &body, false, &what);
                if target == Protocol::Anthropic {
                    assert_eq!(again.model(), UPSTREAM, "{what}");
                }
            }
        }
    }
});
