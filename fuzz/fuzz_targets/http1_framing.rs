//! Differential: the server's framing verdict on a request head (`switchyard_server::
//! framing_verdict`: no body, a length, chunked, or refused with 400/413) against a reference
//! reading of the same bytes written from RFC 9112 and the gateway's documented stricter rules
//! (`switchyard_fuzz::framing_reference`), never from the server's code.
//!
//! Invariant: the two agree on every input — the same framing, or a refusal with a status the
//! reference allows; and the server's own reader (`fuzz_head`) agrees with the verdict.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let verdict = switchyard_server::framing_verdict(data);
    if let Err(difference) = switchyard_fuzz::framing_reference::agrees(data, verdict) {
        panic!("{difference}");
    }
});
