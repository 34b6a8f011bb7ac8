//! The data plane's JSON request inspection (`inspect_json`, `inspect_json_for` with a model
//! from the path) and `Inspected::rewrite`.
//!
//! Invariants: an accepted model is one the data plane may route (non-empty, at most 256 bytes,
//! no control characters); the rewritten body is the original with exactly one span replaced by
//! the new model's JSON string, every other byte kept; inspecting the rewritten body finds the
//! new model and everything else as before; a body whose model comes from the path is never
//! rewritten.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use switchyard_data_plane::request::{inspect_json, inspect_json_for, Inspected};
use switchyard_fuzz::{acceptable_model, seed, splice_offset, UPSTREAM_MODELS};

fn same_except_model(a: &Inspected, b: &Inspected, a_body: &[u8], b_body: &[u8]) {
    assert_eq!(a.stream, b.stream);
    assert_eq!(a.inputs, b.inputs);
    let (mut na, mut nb) = (a.needs, b.needs);
    na.estimated_prompt_tokens = None;
    nb.estimated_prompt_tokens = None;
    assert_eq!(na, nb);
    assert_eq!(a.body_session(a_body), b.body_session(b_body));
}

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    let upstream = UPSTREAM_MODELS[seed(data) as usize % UPSTREAM_MODELS.len()];

    let plain = inspect_json(data);
    assert_eq!(plain, inspect_json_for(data, None));
    if let Ok(ins) = plain {
        assert!(
            acceptable_model(&ins.model),
            "accepted model {:?}",
            ins.model
        );
        assert_eq!(ins.needs.streaming, ins.stream);
        let _ = ins.body_session(data);
        let out = ins.rewrite(&body, upstream);
        if ins.model == upstream {
            assert_eq!(out, body);
        } else {
            let replacement = serde_json::to_string(upstream).unwrap_or_default();
            let at = splice_offset(data, &out, replacement.as_bytes());
            assert!(
                at.is_some(),
                "rewrite touched bytes outside the model: {:?} -> {:?}",
                String::from_utf8_lossy(data),
                String::from_utf8_lossy(&out)
            );
            if acceptable_model(upstream) {
                let again = inspect_json(&out).unwrap_or_else(|e| {
                    panic!(
                        "rewritten body is refused ({e:?}): {}",
                        String::from_utf8_lossy(&out)
                    )
                });
                assert_eq!(again.model, upstream);
                same_except_model(&ins, &again, data, &out);
            }
        }
    }

    for (model, stream) in [("gemini-2.0-flash", false), (upstream, true)] {
        if let Ok(ins) = inspect_json_for(data, Some((model, stream))) {
            assert_eq!(ins.model, model);
            assert_eq!(ins.stream, stream);
            assert_eq!(
                ins.rewrite(&body, "other-model"),
                body,
                "path model rewritten"
            );
            let _ = ins.body_session(data);
        }
    }
});
