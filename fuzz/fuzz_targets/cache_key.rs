//! Differential: the response cache's one-pass reading of a request body
//! (`switchyard_data_plane::CanonicalBody`) against the plain way of making the same key — parse
//! the body into a `serde_json::Value`, write it back with its keys sorted
//! (`normalised_cache_body`).
//!
//! Invariant: the one-pass reader accepts exactly the bodies that parse as one JSON object, and
//! then its bytes are the plain way's, byte for byte (so the key a proxy computes never depends
//! on which reading it used), and each field the cache judges a request by reads back as the
//! value the plain parse holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use switchyard_data_plane::{normalised_cache_body, CanonicalBody, CACHE_JUDGED_FIELDS};

fuzz_target!(|data: &[u8]| {
    let read = CanonicalBody::read(data);
    let parsed = serde_json::from_slice::<Value>(data)
        .ok()
        .filter(Value::is_object);
    match (read, parsed) {
        (None, None) => {}
        (Some(read), Some(value)) => {
            assert_eq!(
                read.normalised(),
                normalised_cache_body(&value).as_slice(),
                "the one-pass key differs from the parsed one"
            );
            for name in CACHE_JUDGED_FIELDS {
                assert_eq!(read.value(name).as_ref(), value.get(name), "field {name}");
            }
        }
        (read, parsed) => panic!(
            "one reading accepts what the other refuses: one-pass {}, parsed {}",
            read.is_some(),
            parsed.is_some()
        ),
    }
});
