//! Snapshot decoding: `prost::Message::decode` of a `switchyard_proto::v1::Snapshot`, then
//! `snapshot_from_proto`.
//!
//! Invariants: an accepted snapshot re-encodes to a message that decodes to itself and is
//! accepted again with the same content (conversion is a fixed point after one round); every
//! enabled route resolves its own pattern (an exact one to a route with that very pattern);
//! every member is found by id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use switchyard_engine::pattern::is_wildcard;
use switchyard_proto::{snapshot_from_proto, snapshot_to_proto, v1};

fuzz_target!(|data: &[u8]| {
    let Ok(wire) = v1::Snapshot::decode(data) else {
        return;
    };
    let Ok(snapshot) = snapshot_from_proto(wire) else {
        return;
    };
    let once = snapshot_to_proto(&snapshot, 0);
    let encoded = once.encode_to_vec();
    let decoded = v1::Snapshot::decode(&encoded[..]).expect("a snapshot we encoded decodes");
    assert_eq!(decoded, once);
    let back = snapshot_from_proto(decoded)
        .unwrap_or_else(|e| panic!("a re-encoded accepted snapshot is refused: {e}"));
    assert_eq!(snapshot_to_proto(&back, 0), once);

    for route in snapshot.routes() {
        for member in &route.members {
            let found = snapshot.member(member.id).map(|(r, m)| (r.id, m.id));
            assert_eq!(found, Some((route.id, member.id)));
        }
        if !route.enabled {
            continue;
        }
        let resolved = snapshot.resolve_route(&route.model_pattern);
        assert!(resolved.is_some(), "route {} does not resolve", route.id);
        if !is_wildcard(&route.model_pattern) {
            assert_eq!(
                resolved.map(|r| r.model_pattern.as_str()),
                Some(route.model_pattern.as_str())
            );
        }
    }
});
