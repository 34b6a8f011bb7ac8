//! The semantic cache's search, purely: prompt embeddings normalised to unit length, scored by
//! cosine similarity (a dot product of unit vectors), kept per rule in a flat, bounded index, and
//! the record a proxy shares with the fleet for each stored vector.
//!
//! A flat scan, not an approximate-nearest-neighbour structure: a rule holds at most
//! [`MAX_SEMANTIC_VECTORS`] vectors and only those of the request's partition are scored (the
//! worst case, the whole bound at 1 536 dimensions in one partition, is a read of 61 MB: tens of
//! milliseconds; see `benches/semantic.rs`); an ANN crate would cost more build time and memory
//! than it saves at this size.

use std::collections::VecDeque;

/// Most vectors one rule's index keeps (the oldest go first).
pub const MAX_SEMANTIC_VECTORS: usize = 10_000;
/// Most dimensions a vector may have.
pub const MAX_SEMANTIC_DIMENSIONS: usize = 8192;

/// Scales `v` to unit length; `false` (and `v` unchanged) when it has no direction or a value
/// that is not finite.
pub fn normalise(v: &mut [f32]) -> bool {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return false;
    }
    for x in v.iter_mut() {
        *x /= norm;
    }
    true
}

/// Cosine similarity of two unit vectors of one dimension; 0 when the dimensions differ. Summed
/// in eight lanes, which the compiler turns into vector instructions (one running sum would
/// keep every addition in order, one at a time).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let mut lanes = [0f32; 8];
    let (xs, ys) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in xs.zip(ys) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// One stored vector: the partition it may be found in, its unit vector, the exact cache key of
/// its answer and when that answer expires (Unix ms).
#[derive(Debug, Clone, PartialEq)]
pub struct SemanticEntry {
    pub partition: [u8; 32],
    pub key: [u8; 32],
    pub expires_at: u64,
    pub vector: Vec<f32>,
}

impl SemanticEntry {
    /// The fleet's record of the entry: partition, key, expiry (big-endian), then each value as
    /// little-endian `f32`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(72 + self.vector.len() * 4);
        out.extend_from_slice(&self.partition);
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.expires_at.to_be_bytes());
        for x in &self.vector {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out
    }

    /// Reads [`encode`](Self::encode)'s bytes; `None` for anything else (a vector of no value, too
    /// many values, or one that is not a unit vector of finite values).
    pub fn decode(bytes: &[u8]) -> Option<SemanticEntry> {
        let partition = bytes.get(..32)?.try_into().ok()?;
        let key = bytes.get(32..64)?.try_into().ok()?;
        let expires_at = u64::from_be_bytes(bytes.get(64..72)?.try_into().ok()?);
        let values = bytes.get(72..)?;
        let dims = values.len() / 4;
        if values.len() % 4 != 0 || dims == 0 || dims > MAX_SEMANTIC_DIMENSIONS {
            return None;
        }
        let mut vector: Vec<f32> = values
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        normalise(&mut vector).then_some(SemanticEntry {
            partition,
            key,
            expires_at,
            vector,
        })
    }
}

/// The best match of a search: its score and its answer's exact key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Match {
    pub score: f32,
    pub key: [u8; 32],
}

/// One rule's vectors, oldest first, at most `bound`.
#[derive(Debug, Clone)]
pub struct SemanticIndex {
    entries: VecDeque<SemanticEntry>,
    bound: usize,
}

impl SemanticIndex {
    pub fn new(bound: usize) -> SemanticIndex {
        SemanticIndex {
            entries: VecDeque::new(),
            bound: bound.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds an entry (replacing one of the same key), dropping the expired ones at the front and
    /// then the oldest beyond the bound.
    pub fn insert(&mut self, entry: SemanticEntry, now: u64) {
        self.entries.retain(|e| e.key != entry.key);
        self.entries.push_back(entry);
        while self.entries.front().is_some_and(|e| e.expires_at <= now) {
            self.entries.pop_front();
        }
        while self.entries.len() > self.bound {
            self.entries.pop_front();
        }
    }

    /// Drops every expired entry.
    pub fn purge(&mut self, now: u64) {
        self.entries.retain(|e| e.expires_at > now);
    }

    /// The live entry of `partition` most similar to `query` (a unit vector), if any.
    pub fn best(&self, partition: &[u8; 32], query: &[f32], now: u64) -> Option<Match> {
        self.best_where(query, now, |e| &e.partition == partition)
    }

    /// The live entry most similar to `query` in any partition.
    pub fn best_anywhere(&self, query: &[f32], now: u64) -> Option<Match> {
        self.best_where(query, now, |_| true)
    }

    fn best_where(
        &self,
        query: &[f32],
        now: u64,
        wanted: impl Fn(&SemanticEntry) -> bool,
    ) -> Option<Match> {
        let mut best: Option<Match> = None;
        for entry in &self.entries {
            if entry.expires_at <= now || !wanted(entry) {
                continue;
            }
            let score = cosine(query, &entry.vector);
            if best.is_none_or(|b| score > b.score) {
                best = Some(Match {
                    score,
                    key: entry.key,
                });
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(partition: u8, key: u8, expires_at: u64, vector: &[f32]) -> SemanticEntry {
        let mut vector = vector.to_vec();
        assert!(normalise(&mut vector));
        SemanticEntry {
            partition: [partition; 32],
            key: [key; 32],
            expires_at,
            vector,
        }
    }

    #[test]
    fn normalised_vectors_score_their_cosine() {
        let mut v = vec![3.0, 4.0];
        assert!(normalise(&mut v));
        assert_eq!(v, [0.6, 0.8]);
        assert!(!normalise(&mut [0.0, 0.0]));
        assert!(!normalise(&mut [f32::NAN, 1.0]));
        let mut big = vec![f32::MAX, f32::MAX];
        assert!(!normalise(&mut big), "an infinite norm");
        assert_eq!(cosine(&[0.6, 0.8], &[0.6, 0.8]), 1.0);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), 0.0);
        assert_eq!(cosine(&[1.0, 0.0], &[-1.0, 0.0]), -1.0);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0, "dimensions differ");
        // Lanes and the tail: 8 + 3 values.
        let a: Vec<f32> = (1..=11).map(|x| x as f32).collect();
        let b: Vec<f32> = (1..=11).map(|x| (12 - x) as f32).collect();
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(cosine(&a, &b), exact);
    }

    #[test]
    fn the_best_live_entry_of_the_partition_is_found() {
        let mut index = SemanticIndex::new(10);
        index.insert(entry(1, 1, 100, &[1.0, 0.0]), 0);
        index.insert(entry(1, 2, 100, &[1.0, 1.0]), 0);
        index.insert(entry(2, 3, 100, &[0.0, 1.0]), 0);
        index.insert(entry(1, 4, 10, &[0.0, 1.0]), 0);
        let best = index.best(&[1; 32], &[0.0, 1.0], 20).unwrap();
        assert_eq!(best.key, [2; 32], "the expired exact match is skipped");
        assert!((best.score - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(index.best(&[1; 32], &[0.0, 1.0], 5).unwrap().key, [4; 32]);
        assert_eq!(index.best(&[2; 32], &[1.0, 0.0], 20).unwrap().score, 0.0);
        assert!(index.best(&[9; 32], &[1.0, 0.0], 20).is_none());
        assert_eq!(
            index.best_anywhere(&[0.0, 1.0], 20).unwrap().key,
            [3; 32],
            "any partition"
        );
        // A tie keeps the first found.
        let mut tie = SemanticIndex::new(10);
        tie.insert(entry(1, 1, 100, &[1.0, 0.0]), 0);
        tie.insert(entry(1, 2, 100, &[1.0, 0.0]), 0);
        assert_eq!(tie.best(&[1; 32], &[1.0, 0.0], 0).unwrap().key, [1; 32]);
    }

    #[test]
    fn the_index_keeps_its_bound_replaces_a_key_and_drops_the_expired() {
        let mut index = SemanticIndex::new(2);
        assert!(index.is_empty());
        index.insert(entry(1, 1, 100, &[1.0]), 0);
        index.insert(entry(1, 2, 100, &[1.0]), 0);
        index.insert(entry(1, 3, 100, &[1.0]), 0);
        assert_eq!(index.len(), 2);
        assert!(index.best_anywhere(&[1.0], 0).unwrap().key != [1; 32]);
        index.insert(entry(1, 3, 200, &[1.0]), 0);
        assert_eq!(index.len(), 2, "the same key replaced");
        // An expired entry at the front leaves on the next insert.
        let mut aging = SemanticIndex::new(5);
        aging.insert(entry(1, 1, 10, &[1.0]), 0);
        aging.insert(entry(1, 2, 100, &[1.0]), 10);
        assert_eq!(aging.len(), 1);
        aging.insert(entry(1, 3, 50, &[1.0]), 10);
        aging.purge(50);
        assert_eq!(aging.len(), 1);
        aging.purge(49);
        assert_eq!(aging.len(), 1);
        assert_eq!(SemanticIndex::new(0).bound, 1);
    }

    #[test]
    fn a_record_reads_back_and_a_bad_one_is_refused() {
        let e = entry(7, 8, 123_456, &[1.0, 2.0, 2.0]);
        let bytes = e.encode();
        assert_eq!(bytes.len(), 72 + 12);
        assert_eq!(SemanticEntry::decode(&bytes), Some(e));
        assert_eq!(SemanticEntry::decode(&bytes[..72]), None, "no values");
        assert_eq!(SemanticEntry::decode(&bytes[..73]), None, "a partial value");
        assert_eq!(SemanticEntry::decode(&bytes[..71]), None);
        let mut zero = bytes[..72].to_vec();
        zero.extend_from_slice(&0f32.to_le_bytes());
        assert_eq!(SemanticEntry::decode(&zero), None, "no direction");
        let mut huge = bytes[..72].to_vec();
        huge.extend(std::iter::repeat_n(1f32.to_le_bytes(), MAX_SEMANTIC_DIMENSIONS + 1).flatten());
        assert_eq!(SemanticEntry::decode(&huge), None);
        let mut most = bytes[..72].to_vec();
        most.extend(std::iter::repeat_n(1f32.to_le_bytes(), MAX_SEMANTIC_DIMENSIONS).flatten());
        assert!(SemanticEntry::decode(&most).is_some());
    }
}
