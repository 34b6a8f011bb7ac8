//! The semantic cache's local indexes: per rule, the stored prompts' unit vectors (the engine's
//! flat [`SemanticIndex`], at most [`MAX_SEMANTIC_VECTORS`], the oldest out) under the
//! embedding model they were made with, and how far the fleet's stream of the rule has been
//! read. Every proxy searches its own copy: no round trip per candidate.

use std::collections::HashMap;
use std::sync::RwLock;

use switchyard_engine::semantic::{Match, SemanticEntry, SemanticIndex, MAX_SEMANTIC_VECTORS};

struct RuleIndex {
    model: String,
    index: SemanticIndex,
    /// The id of the last record read of the rule's stream.
    cursor: String,
}

/// Every rule's index.
#[derive(Default)]
pub struct SemanticIndexes {
    rules: RwLock<HashMap<i64, RuleIndex>>,
}

impl SemanticIndexes {
    /// The best live match of `query` among `rule`'s vectors of `partition` made with `model`.
    pub fn best(
        &self,
        rule: i64,
        model: &str,
        partition: &[u8; 32],
        query: &[f32],
        now: u64,
    ) -> Option<Match> {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        let found = rules.get(&rule).filter(|r| r.model == model)?;
        found.index.best(partition, query, now)
    }

    /// Adds an entry to `rule`'s index (a new index when the rule had none or another model).
    pub fn insert(&self, rule: i64, model: &str, entry: SemanticEntry, now: u64) {
        let mut rules = self.rules.write().unwrap_or_else(|e| e.into_inner());
        let slot = rules.entry(rule).or_insert_with(|| fresh(model));
        if slot.model != model {
            *slot = fresh(model);
        }
        slot.index.insert(entry, now);
    }

    /// Where reading `rule`'s stream goes on from (`"0"`: its start).
    pub fn cursor(&self, rule: i64) -> String {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        rules
            .get(&rule)
            .map_or_else(|| "0".to_owned(), |r| r.cursor.clone())
    }

    /// Records that `rule`'s stream was read up to `id`.
    pub fn set_cursor(&self, rule: i64, model: &str, id: String) {
        let mut rules = self.rules.write().unwrap_or_else(|e| e.into_inner());
        rules.entry(rule).or_insert_with(|| fresh(model)).cursor = id;
    }

    /// Keeps the indexes of `live` rules (id, model) only, their expired entries dropped.
    pub fn retain(&self, live: &[(i64, &str)], now: u64) {
        let mut rules = self.rules.write().unwrap_or_else(|e| e.into_inner());
        rules.retain(|id, r| live.iter().any(|(l, m)| l == id && *m == r.model));
        for r in rules.values_mut() {
            r.index.purge(now);
        }
    }

    /// Each rule's count of vectors.
    pub fn sizes(&self) -> Vec<(i64, usize)> {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        rules.iter().map(|(id, r)| (*id, r.index.len())).collect()
    }
}

fn fresh(model: &str) -> RuleIndex {
    RuleIndex {
        model: model.to_owned(),
        index: SemanticIndex::new(MAX_SEMANTIC_VECTORS),
        cursor: "0".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(key: u8) -> SemanticEntry {
        SemanticEntry {
            partition: [1; 32],
            key: [key; 32],
            expires_at: 100,
            vector: vec![1.0, 0.0],
        }
    }

    #[test]
    fn an_index_answers_for_its_model_only_and_follows_its_rules() {
        let indexes = SemanticIndexes::default();
        indexes.insert(1, "e", entry(1), 0);
        assert_eq!(
            indexes.best(1, "e", &[1; 32], &[1.0, 0.0], 0).unwrap().key,
            [1; 32]
        );
        assert!(indexes.best(1, "other", &[1; 32], &[1.0, 0.0], 0).is_none());
        assert!(indexes.best(2, "e", &[1; 32], &[1.0, 0.0], 0).is_none());
        assert_eq!(indexes.cursor(1), "0");
        indexes.set_cursor(1, "e", "5-0".into());
        assert_eq!(indexes.cursor(1), "5-0");
        indexes.insert(1, "f", entry(2), 0);
        assert_eq!(indexes.sizes(), [(1, 1)]);
        assert_eq!(indexes.cursor(1), "0", "another model starts over");
        indexes.retain(&[(1, "e")], 0);
        assert!(indexes.sizes().is_empty(), "the rule's model changed");
        indexes.insert(3, "e", entry(3), 0);
        indexes.retain(&[(3, "e")], 100);
        assert_eq!(indexes.sizes(), [(3, 0)], "expired entries go");
    }
}
