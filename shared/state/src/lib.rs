//! Shared runtime state of the fleet behind one [`StateStore`] trait: member cooldowns and
//! failure counts, channel consecutive failures and breaker trips, per-channel in-flight counts,
//! health records per (channel, upstream model), sticky bindings, canary promotion and runtime
//! credential disables.
//!
//! Architecture invariant: the hot path never awaits. Reads go through a local view that
//! implements [`switchyard_engine::HealthView`] (plain memory, one read lock per selection);
//! writes are synchronous calls that update that local view. A fleet implementation (Redis) keeps
//! the same shape: it applies each write locally, enqueues it for a background writer and merges
//! other proxies' changes into its view.
//!
//! Time is always passed in (`now`, Unix milliseconds), so the rules are testable without sleeps.

pub mod cache;
mod limits;
mod memory;
mod records;
mod redis;
mod store;
mod types;

/// The conformance suite is test code: compiled into this crate's own unit tests, and into the
/// library only with the `conformance` feature, which only dev-dependencies turn on (the Redis
/// store's integration tests run the very same checks). No production binary links it.
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

pub use self::redis::{
    mask_url, RedisConfig, RedisConfigError, RedisCounters, RedisStats, RedisStore, RedisTarget,
    SyncReport,
};
pub use limits::{
    allowance, Admission, Limit, LimitKey, LimitMode, LimitRequest, LimitStatus, Metric,
    RateHeader, Refusal, ScopeKind, Window, MAX_REPORTED_LIMITS, RETRY_SOON_MS,
};
pub use memory::InMemoryStore;
pub use records::{
    IndexEntry, RecordError, RecordFuture, MAX_INDEX_ENTRIES, MAX_RECORD_BYTES, RECORD_TIMEOUT,
};
pub use store::{unix_ms, InFlightGuard, StateStore};
pub use types::*;
