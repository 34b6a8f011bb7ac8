//! The server's own HTTP/1.1 request-head reading (`switchyard_server::fuzz_head`): which heads
//! it serves itself, where their parts lie, and the request it builds from them.
//!
//! Invariants (asserted inside `fuzz_head`): a head served here lies within the bytes read, its
//! body is within the size the server reads before calling a service, every header it found is
//! in the request it builds (none of them `transfer-encoding`), a head served here has one
//! `host` and at most one `content-length`, a refused one gets 400 or 413, the bytes followed
//! as a chunked or sized body give the same result whole and in two pieces, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchyard_server::fuzz_head(data);
});
