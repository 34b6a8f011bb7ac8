//! Differential: the response cache's one-pass reading of a request body
//! (`switchyard_data_plane::CanonicalBody`) against the plain way of making the same key — parse
//! the body into a `serde_json::Value`, write it back with its keys sorted
//! (`normalised_cache_body`).
//!
//! Invariant: the one-pass reader accepts exactly the bodies that parse as one JSON object, and
//! then its bytes are the plain way's, byte for byte (so the key a proxy computes never depends
//! on which reading it used), and each field the cache judges a request by is kept aside as the
//! plain parse's field written the same way.
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
            // Compared as bytes: the field kept aside is the parsed field written sorted.
            // (Parsed back it may differ from the body's own number in the last digit:
            // serde_json's default float parsing is not correctly rounded.)
            for name in CACHE_JUDGED_FIELDS {
                let expected = value.get(name).map(|field| {
                    let wrapped = normalised_cache_body(&serde_json::json!({ "x": field }));
                    wrapped[5..wrapped.len() - 1].to_vec()
                });
                assert_eq!(read.field(name).map(<[u8]>::to_vec), expected, "field {name}");
            }
        }
        (read, parsed) => panic!(
            "one reading accepts what the other refuses: one-pass {}, parsed {}",
            read.is_some(),
            parsed.is_some()
        ),
    }
});
