//! `StreamTranslator::push`/`finish` for every (upstream, client) pair, on the input as one
//! chunk, byte by byte, and in pseudo-random chunks.
//!
//! Invariants: the output, usage and end flags do not depend on how the bytes were split;
//! `finish` is idempotent; a translated stream is SSE whose every event is JSON (or OpenAI's
//! `[DONE]`). `UsageScanner` (passthrough streams) reads the same usage however the bytes were
//! split, and so does its stripping form, whose output does not depend on the split either.
//! Usage stays bounded whatever the stream says (each figure within `MAX_REQUEST_TOKENS`,
//! cached within input; the seeds carry figures at the extremes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_fuzz::{bytewise, chunks, pairs, seed, Rng};
use switchyard_provider::{
    Protocol, SseDecoder, StreamTranslator, Usage, UsageScanner, MAX_REQUEST_TOKENS,
};

fn check_bounds(usage: Usage, what: &str) {
    assert!(
        usage.input_tokens <= MAX_REQUEST_TOKENS
            && usage.output_tokens <= MAX_REQUEST_TOKENS
            && usage.cached_tokens <= usage.input_tokens,
        "{what}: usage out of bounds: {usage:?}"
    );
}

/// The stripping scanner's output and usage.
fn strip(parts: &[&[u8]]) -> (Vec<u8>, Usage) {
    let mut scanner = UsageScanner::stripping_usage(Protocol::OpenAi);
    let mut out = Vec::new();
    for part in parts {
        scanner.filter(part, &mut out);
    }
    scanner.finish(&mut out);
    (out, scanner.usage())
}

#[derive(Debug, PartialEq)]
struct Run {
    out: Vec<u8>,
    usage: Usage,
    upstream_done: bool,
    client_closed: bool,
}

fn run(upstream: Protocol, client: Protocol, include_usage: bool, parts: &[&[u8]]) -> Run {
    let mut t = StreamTranslator::new(upstream, client, "client-model", include_usage);
    let mut out = Vec::new();
    for part in parts {
        t.push(part, &mut out);
    }
    t.finish(&mut out);
    let len = out.len();
    t.finish(&mut out);
    assert_eq!(
        out.len(),
        len,
        "{upstream}→{client}: a second finish wrote more"
    );
    Run {
        out,
        usage: t.usage(),
        upstream_done: t.upstream_done(),
        client_closed: t.client_closed(),
    }
}

fn scan(protocol: Protocol, parts: &[&[u8]]) -> Usage {
    let mut scanner = UsageScanner::new(protocol);
    for part in parts {
        scanner.push(part);
    }
    scanner.usage()
}

fuzz_target!(|data: &[u8]| {
    let mut rng = Rng::new(seed(data));
    let random = chunks(data, &mut rng, 64);
    let single = bytewise(data);
    let stripped = strip(&[data]);
    check_bounds(stripped.1, "stripping scanner");
    assert_eq!(stripped, strip(&single), "stripping scanner, byte by byte");
    assert_eq!(stripped, strip(&random), "stripping scanner, chunked");
    for protocol in Protocol::ALL {
        let whole = scan(protocol, &[data]);
        check_bounds(whole, &format!("{protocol} usage scanner"));
        assert_eq!(
            whole,
            scan(protocol, &single),
            "{protocol} usage scanner, byte by byte"
        );
        assert_eq!(
            whole,
            scan(protocol, &random),
            "{protocol} usage scanner, chunked"
        );
    }
    for (upstream, client) in pairs() {
        let include_usage = rng.next() & 1 == 1;
        let whole = run(upstream, client, include_usage, &[data]);
        check_bounds(whole.usage, &format!("{upstream}→{client}"));
        assert_eq!(
            whole,
            run(upstream, client, include_usage, &single),
            "{upstream}→{client}: byte-by-byte differs from whole"
        );
        assert_eq!(
            whole,
            run(upstream, client, include_usage, &random),
            "{upstream}→{client}: chunked differs from whole"
        );
        if upstream != client {
            let mut decoder = SseDecoder::new();
            let mut events = decoder.push(&whole.out);
            events.extend(decoder.finish());
            for ev in events {
                if client == Protocol::OpenAi && ev.data == "[DONE]" {
                    continue;
                }
                assert!(
                    serde_json::from_str::<serde_json::Value>(&ev.data).is_ok(),
                    "{upstream}→{client} emitted a non-JSON event: {:?}",
                    ev.data
                );
            }
        }
    }
});
