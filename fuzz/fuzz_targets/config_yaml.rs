//! The standalone data plane's YAML config (`config::parse_yaml`).
//!
//! Invariants: what the parser accepts stays within the expanded-size bound (aliases repeat
//! what their anchor holds, so a file of kilobytes could stand for gigabytes): the parsed
//! configuration, measured as the bound measures a file, is never more than twice the bound
//! (defaults the file left out are filled in); a config the YAML loader accepts is a snapshot
//! the wire format carries and accepts again unchanged (proxies cache and reload snapshots in
//! that form), and every route it defines resolves.
//!
//! With `FUZZ_WRITE_SNAPSHOT_SEEDS=<dir>` set, every accepted config is also written there as an
//! encoded `v1::Snapshot`: that is how the `snapshot_proto` seeds are made from these
//! (`fuzz/seeds/README.md`).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prost::Message;
use switchyard_data_plane::config::{
    parse_raw, parse_yaml, MAX_EXPANDED_BYTES, MAX_FILE_BYTES, VALUE_OVERHEAD,
};
use switchyard_engine::Snapshot;
use switchyard_proto::{snapshot_from_proto, snapshot_to_proto};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(raw) = parse_raw(text) else {
        return;
    };
    assert!(text.len() <= MAX_FILE_BYTES);
    let parsed = serde_json::to_value(&raw).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let size = measure(&parsed);
    assert!(
        size <= 2 * MAX_EXPANDED_BYTES,
        "a file of {} bytes parsed into {size} bytes, past the expanded-size bound",
        text.len()
    );
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

/// A parsed value's size as the bound counts a file's: every value's text plus its overhead.
/// A null is a field the file left out (an undeclared capability): it counts nothing.
fn measure(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Null => 0,
        Value::Bool(_) | Value::Number(_) => VALUE_OVERHEAD,
        Value::String(text) => VALUE_OVERHEAD + text.len(),
        Value::Array(items) => VALUE_OVERHEAD + items.iter().map(measure).sum::<usize>(),
        Value::Object(map) => {
            VALUE_OVERHEAD
                + map
                    .iter()
                    .filter(|(_, value)| !value.is_null())
                    .map(|(key, value)| VALUE_OVERHEAD + key.len() + measure(value))
                    .sum::<usize>()
        }
    }
}
