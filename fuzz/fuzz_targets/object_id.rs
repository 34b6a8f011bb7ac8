//! The data plane's file and batch ids (`object_id`): the parser of the ids clients send back.
//!
//! Invariants: reading any text never panics and accepts only an id some encoding makes (its
//! re-encoding is the text itself); an id made from the input reads back to what made it, is
//! no id of another kind or under another key, and any one character changed makes it no id.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchyard_data_plane::object_id::fuzz(data);
});
