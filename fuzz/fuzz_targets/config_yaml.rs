//! The standalone data plane's YAML config (`config::parse_yaml`).
//!
//! Invariants: a config the YAML loader accepts is a snapshot the wire format carries and
//! accepts again unchanged (proxies cache and reload snapshots in that form), and every route
//! it defines resolves.
//!
//! With `FUZZ_WRITE_SNAPSHOT_SEEDS=<dir>` set, every accepted config is also written there as an
//! encoded `v1::Snapshot`: that is how the `snapshot_proto` seeds are made from these
//! (`fuzz/seeds/README.md`).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prost::Message;
use switchyard_data_plane::config::parse_yaml;
use switchyard_engine::Snapshot;
use switchyard_proto::{snapshot_from_proto, snapshot_to_proto};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parts) = parse_yaml(text, 7) else {
        return;
    };
    let snapshot = Snapshot::new(parts);
    let wire = snapshot_to_proto(&snapshot, 0);
    let back = snapshot_from_proto(wire.clone())
        .unwrap_or_else(|e| panic!("the YAML config is refused on the wire: {e}\n{text}"));
    assert_eq!(snapshot_to_proto(&back, 0), wire);
    static SEEDS: OnceLock<Option<String>> = OnceLock::new();
    if let Some(dir) = SEEDS.get_or_init(|| std::env::var("FUZZ_WRITE_SNAPSHOT_SEEDS").ok()) {
        let bytes = wire.encode_to_vec();
        let name = format!("{dir}/{:016x}.pb", switchyard_fuzz::seed(&bytes));
        std::fs::write(&name, bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for route in snapshot.routes() {
        if route.enabled {
            assert!(
                snapshot.resolve_route(&route.model_pattern).is_some(),
                "route {} does not resolve its own pattern",
                route.id
            );
        }
    }
});
