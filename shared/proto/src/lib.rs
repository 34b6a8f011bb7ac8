//! The snapshot service's wire types (generated from `proto/switchyard/snapshot/v1`), their
//! explicit conversion to and from the engine's [`switchyard_engine::Snapshot`], the client
//! helpers proxies use to follow the control plane, and the usage reports' wire contract
//! ([`usage`]: the bounds a record keeps; the proxy's buffer and report task are the data
//! plane's).
//!
//! Architecture invariant: only this crate and the control plane's gRPC edge know about protobuf
//! types. Everything else works on validated engine types; a received snapshot is converted in
//! two stages (wire message → [`SnapshotParts`](switchyard_engine::SnapshotParts) with every
//! field checked → [`Snapshot::new`](switchyard_engine::Snapshot::new)).

pub mod client;
pub mod convert;
pub mod guardrail;
pub mod shadow;
pub mod usage;

/// Generated protobuf messages and gRPC stubs of `switchyard.snapshot.v1`.
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]
pub mod v1;

pub use client::{watch_snapshots, WatchAuth, WatchError};
pub use convert::{
    digest_from_hex, hex, sha256_hex, snapshot_from_proto, snapshot_to_proto, token_digest,
    token_hash, ConversionError, SCHEMA_VERSION,
};
pub use guardrail::{add_example, add_finding, add_guardrail};
pub use shadow::{latency_bucket, ShadowCounts, SHADOW_HIST_BUCKETS, SHADOW_LATENCY_BOUNDS_MS};
pub use usage::{MAX_RECORD_REQUESTS, MAX_TOKENS_PER_REQUEST};
