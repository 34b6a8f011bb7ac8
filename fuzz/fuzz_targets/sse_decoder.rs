//! `SseDecoder` on arbitrary bytes split arbitrarily.
//!
//! Invariants: the events do not depend on how the bytes were split; `finish` delivers at most
//! one event and then nothing; `\r\n` and lone `\r` line endings decode as `\n` ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_fuzz::{bytewise, chunks, seed, Rng};
use switchyard_provider::{SseDecoder, SseEvent};

fn decode(parts: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    for part in parts {
        events.extend(decoder.push(part));
    }
    events.extend(decoder.finish());
    assert_eq!(decoder.finish(), None, "finish twice");
    events
}

fuzz_target!(|data: &[u8]| {
    let whole = decode(&[data]);
    assert_eq!(whole, decode(&bytewise(data)), "byte-by-byte");
    let mut rng = Rng::new(seed(data));
    assert_eq!(whole, decode(&chunks(data, &mut rng, 32)), "chunked");
    if !data.contains(&b'\r') {
        let mut crlf = Vec::with_capacity(data.len() * 2);
        for &b in data {
            if b == b'\n' {
                crlf.push(b'\r');
            }
            crlf.push(b);
        }
        assert_eq!(whole, decode(&[&crlf]), "CRLF line endings");
        let cr: Vec<u8> = data
            .iter()
            .map(|&b| if b == b'\n' { b'\r' } else { b })
            .collect();
        assert_eq!(whole, decode(&[&cr]), "CR line endings");
        assert_eq!(whole, decode(&bytewise(&cr)), "CR line endings, byte by byte");
    }
});
