//! The upstream client's own HTTP/1.1 answer reading (`switchyard_upstream::fuzz_chunked`): an
//! answer head, and a chunked body arriving split at arbitrary points.
//!
//! Invariants (asserted inside `fuzz_chunked`): the data decoded and the outcome (end, more
//! needed, or the error) are the same however the bytes are split, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let splits: Vec<usize> = data.iter().take(4).map(|&b| usize::from(b) * 7).collect();
    switchyard_upstream::fuzz_chunked(data, &splits);
});
