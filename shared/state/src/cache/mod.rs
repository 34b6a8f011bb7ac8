//! The exact response cache's stores: one [`ResponseCache`] trait (`entry.rs`, at the bottom),
//! the in-memory store (`memory.rs`, least recently used out, bounded by bytes), the fleet's
//! Redis store (`redis.rs`, bounded by bytes, nearest expiry out; its writes batched by a
//! background writer, `writes.rs`; its lookups on each serving thread's own connection,
//! `local.rs`) and the conformance suite both pass (`conformance.rs`).

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod entry;
mod local;
mod memory;
mod redis;
mod writes;

pub use self::redis::RedisCache;
pub use entry::{
    CacheEntry, CacheKey, CacheUnavailable, CacheUsage, ResponseCache, SharedRecord, SHARED_VECTORS,
};
pub use memory::MemoryCache;
