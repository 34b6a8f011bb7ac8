//! The data plane's multipart inspection (`inspect_multipart`) and `Inspected::rewrite`.
//!
//! Input: the first line is the `Content-Type` value (so the boundary is fuzzed too, and may
//! disagree with the body); the rest is the body.
//!
//! Invariants: an accepted model is routable; the rewritten body is the original with exactly one
//! span replaced by the new model, every other byte kept; inspecting the rewritten body finds
//! the new model and the same stream flag.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use switchyard_data_plane::request::inspect_multipart;
use switchyard_fuzz::{acceptable_model, seed, splice_offset};

/// Replacement models a multipart value can carry as they are (no CR/LF, no leading or
/// trailing whitespace, no `-`, so never part of a delimiter).
const UPSTREAM_MODELS: [&str; 4] = ["whisper1", "gpt4o_transcribe", "models/x.y", "模型"];

fuzz_target!(|data: &[u8]| {
    let (content_type, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (String::from_utf8_lossy(&data[..at]), &data[at + 1..]),
        None => (String::from_utf8_lossy(data), &[][..]),
    };
    let Ok(ins) = inspect_multipart(body, &content_type) else {
        return;
    };
    assert!(
        acceptable_model(&ins.model),
        "accepted model {:?}",
        ins.model
    );
    assert_eq!(ins.needs.streaming, ins.stream);
    let upstream = UPSTREAM_MODELS[seed(data) as usize % UPSTREAM_MODELS.len()];
    let original = Bytes::copy_from_slice(body);
    let out = ins.rewrite(&original, upstream);
    if ins.model == upstream {
        assert_eq!(out, original);
        return;
    }
    assert!(
        splice_offset(body, &out, upstream.as_bytes()).is_some(),
        "rewrite touched bytes outside the model: {:?} -> {:?}",
        String::from_utf8_lossy(body),
        String::from_utf8_lossy(&out)
    );
    let again = inspect_multipart(&out, &content_type).unwrap_or_else(|e| {
        panic!(
            "rewritten body is refused ({e:?}): {}",
            String::from_utf8_lossy(&out)
        )
    });
    assert_eq!(again.model, upstream);
    assert_eq!(again.stream, ins.stream);
});
