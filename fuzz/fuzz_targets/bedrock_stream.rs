//! Bedrock's event-stream decoder and its conversion to Anthropic SSE on arbitrary bytes split
//! arbitrarily (the bytes an upstream sends are untrusted).
//!
//! Invariants: the outcome (the SSE written, whether the framing failed, whether the stream
//! ended) does not depend on how the bytes were split; every event written is an SSE event whose
//! data is JSON; a stream that ends is never fed further.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_fuzz::{bytewise, chunks, seed, Rng};
use switchyard_provider::bedrock::StreamConverter;
use switchyard_provider::SseDecoder;

/// (SSE bytes, framing failed, ended cleanly).
fn convert(parts: &[&[u8]]) -> (Vec<u8>, bool, bool) {
    let mut c = StreamConverter::new("m", "msg_bdrk_fuzz");
    let mut out = Vec::new();
    for part in parts {
        if c.done() {
            break;
        }
        if c.push(part, &mut out).is_err() {
            return (out, true, false);
        }
    }
    let ended = c.finish(&mut out).is_ok();
    (out, false, ended)
}

fuzz_target!(|data: &[u8]| {
    let whole = convert(&[data]);
    assert_eq!(whole, convert(&bytewise(data)), "byte-by-byte");
    let mut rng = Rng::new(seed(data));
    assert_eq!(whole, convert(&chunks(data, &mut rng, 64)), "chunked");
    let mut sse = SseDecoder::new();
    for event in sse.push(&whole.0) {
        assert!(event.event.is_some(), "every event is named");
        serde_json::from_str::<serde_json::Value>(&event.data).expect("JSON data");
    }
    assert_eq!(sse.finish(), None, "no partial event");
});
