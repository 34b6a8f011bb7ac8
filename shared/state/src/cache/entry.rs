//! The response cache's store interface, at the bottom of the cache: a key, an entry (one
//! canonical answer and what it cost), the [`ResponseCache`] trait both stores implement, and
//! the entry's byte layout in a shared store.
//!
//! The cache is the one piece of shared state a request may wait on: a hit is worth a round
//! trip, so a lookup goes to the store, bounded by a short timeout. A store that cannot answer
//! says [`CacheUnavailable`], and the request goes on as if the cache were not there.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use switchyard_engine::UnixMillis;

/// A cache key: the SHA-256 (or any 32-byte digest) of everything that can change the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// Lower-case hex, as the key appears in a shared store.
    pub fn hex(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::with_capacity(64);
        for byte in self.0 {
            let _ = write!(out, "{byte:02x}");
        }
        out
    }
}

/// One stored answer: its canonical body (the plain answer in the client's protocol), when it
/// was stored, and the usage and cost of the request that produced it (what a hit saves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    pub stored_at: UnixMillis,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// Pico-USD; `None`: the answer was unpriced.
    pub cost_pico: Option<u128>,
    pub body: Vec<u8>,
}

/// The store could not answer (unreachable, too slow, or a reply that is not an entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheUnavailable(pub String);

impl std::fmt::Display for CacheUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "response cache unavailable: {}", self.0)
    }
}

impl std::error::Error for CacheUnavailable {}

/// What a store holds, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    pub entries: u64,
    pub bytes: u64,
}

/// A response cache store. Time is an argument (`now`, Unix ms) so every store expires alike
/// and the rules are tested without sleeping.
pub trait ResponseCache: Send + Sync {
    /// The live entry under `key`, if any.
    fn get<'a>(
        &'a self,
        key: &'a CacheKey,
        now: UnixMillis,
    ) -> BoxFuture<'a, Result<Option<Arc<CacheEntry>>, CacheUnavailable>>;

    /// Stores `entry` under `key` for `ttl_ms`, replacing what was there and evicting others to
    /// stay within the store's bound; `false` when the entry alone exceeds the bound.
    fn put<'a>(
        &'a self,
        key: &'a CacheKey,
        entry: CacheEntry,
        ttl_ms: u64,
        now: UnixMillis,
    ) -> BoxFuture<'a, Result<bool, CacheUnavailable>>;

    /// Stores `entry` under `key` as [`ResponseCache::put`] does, without waiting: a store
    /// that cannot take the write now (its queue full, its Redis unreachable) lets it go and
    /// counts it ([`ResponseCache::writes_dropped`]).
    fn offer(&self, key: &CacheKey, entry: CacheEntry, ttl_ms: u64, now: UnixMillis);

    /// What the store holds now (a shared store: as far as this proxy knows).
    fn usage(&self) -> CacheUsage;

    /// Writes offered and let go so far (no room to queue them, or no connection).
    fn writes_dropped(&self) -> u64 {
        0
    }

    /// Appends a semantic cache record to `rule`'s stream, which every proxy of the fleet
    /// tails (at most [`SHARED_VECTORS`] kept, the oldest out). A store in memory shares
    /// nothing: the proxy's own index is all there is.
    fn share_vector(
        &self,
        rule: i64,
        record: Vec<u8>,
    ) -> BoxFuture<'_, Result<(), CacheUnavailable>> {
        let _ = (rule, record);
        Box::pin(async { Ok(()) })
    }

    /// Up to `count` records of `rule`'s stream after the record id `after` (`"0"`: from the
    /// start), oldest first, each with its id.
    fn shared_vectors<'a>(
        &'a self,
        rule: i64,
        after: &'a str,
        count: usize,
    ) -> BoxFuture<'a, Result<Vec<SharedRecord>, CacheUnavailable>> {
        let _ = (rule, after, count);
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// A record of a rule's shared stream: its id and its bytes.
pub type SharedRecord = (String, Vec<u8>);

/// Most records one rule's shared stream keeps (about; Redis trims whole nodes).
pub const SHARED_VECTORS: usize = 10_000;

/// Version byte of the stored layout.
const LAYOUT_V1: u8 = 1;
/// Version, stored_at, three token counts, flag + cost.
const HEADER: usize = 1 + 8 * 4 + 1 + 16;

impl CacheEntry {
    /// The bytes this entry takes in a store (its layout's length).
    pub fn size(&self) -> usize {
        HEADER + self.body.len()
    }

    /// The entry as stored in a shared store: a version byte, big-endian integers, the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size());
        self.encode_into(&mut out);
        out
    }

    /// [`CacheEntry::encode`]'s bytes appended to `out` (no buffer of their own).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(LAYOUT_V1);
        for n in [
            self.stored_at,
            self.input_tokens,
            self.output_tokens,
            self.cached_tokens,
        ] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out.push(u8::from(self.cost_pico.is_some()));
        out.extend_from_slice(&self.cost_pico.unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&self.body);
    }

    /// Reads [`CacheEntry::encode`]'s bytes back; `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<CacheEntry> {
        let (header, body) = (bytes.get(..HEADER)?, bytes.get(HEADER..)?);
        if header.first() != Some(&LAYOUT_V1) {
            return None;
        }
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_be_bytes(header.get(at..at + 8)?.try_into().ok()?))
        };
        let cost = u128::from_be_bytes(header.get(34..50)?.try_into().ok()?);
        Some(CacheEntry {
            stored_at: u64_at(1)?,
            input_tokens: u64_at(9)?,
            output_tokens: u64_at(17)?,
            cached_tokens: u64_at(25)?,
            cost_pico: (header.get(33) == Some(&1)).then_some(cost),
            body: body.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_entry_reads_back_from_its_bytes_and_nothing_else_does() {
        let entry = CacheEntry {
            stored_at: 1_700_000_000_000,
            input_tokens: 12,
            output_tokens: 34,
            cached_tokens: 5,
            cost_pico: Some(u128::from(u64::MAX) + 7),
            body: b"{\"x\":1}".to_vec(),
        };
        let bytes = entry.encode();
        assert_eq!(bytes.len(), entry.size());
        assert_eq!(CacheEntry::decode(&bytes), Some(entry.clone()));
        let unpriced = CacheEntry {
            cost_pico: None,
            ..entry
        };
        assert_eq!(CacheEntry::decode(&unpriced.encode()), Some(unpriced));
        assert_eq!(CacheEntry::decode(b"short"), None);
        let mut other = bytes.clone();
        other[0] = 2;
        assert_eq!(CacheEntry::decode(&other), None);
        assert_eq!(CacheKey([0xab; 32]).hex(), "ab".repeat(32));
    }

    #[test]
    fn an_unavailable_cache_says_why() {
        let e = CacheUnavailable("not connected".into());
        assert_eq!(e.to_string(), "response cache unavailable: not connected");
    }
}
