//! The data plane's check of an OpenAI completion answer: the one-pass read against the typed
//! read it stands in for.
//!
//! Invariants: wherever the one-pass read gives a verdict, it is the typed read's verdict —
//! fine with the same usage, empty, never malformed (a body that is not valid JSON is always left
//! to the typed read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_data_plane::{completion_verdicts, BodyCheck};

fuzz_target!(|data: &[u8]| {
    let (scanned, typed) = completion_verdicts(data);
    if let Some(scanned) = scanned {
        assert_ne!(scanned, BodyCheck::Malformed, "the one-pass read called it malformed");
        assert_eq!(
            scanned,
            typed,
            "the two reads disagree on {:?}",
            String::from_utf8_lossy(data)
        );
    }
});
