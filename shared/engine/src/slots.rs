//! The dense layout of a snapshot's health records: one slot per (channel, upstream model).

use crate::fxhash::FxBuildHasher;
use crate::ids::ChannelId;

/// A borrowed (channel, upstream model) key; hashes exactly like the owned tuple.
#[derive(Hash)]
pub(crate) struct HealthKeyRef<'a>(pub(crate) ChannelId, pub(crate) &'a str);

impl hashbrown::Equivalent<(ChannelId, String)> for HealthKeyRef<'_> {
    fn equivalent(&self, key: &(ChannelId, String)) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

/// Every distinct (channel, upstream model) a snapshot's members use, each at a dense slot
/// (first-seen order over the routes and their members). Built once per snapshot and shared
/// by `Arc`: a view that lays its records out in this order ([`DenseHealth`]) lets selection
/// read a candidate's record from an array instead of hashing its model name.
#[derive(Debug, Default)]
pub struct HealthSlots {
    keys: Vec<(ChannelId, String)>,
    index: HealthRecordsIndex,
}

type HealthRecordsIndex = hashbrown::HashMap<(ChannelId, String), u32, FxBuildHasher>;

impl HealthSlots {
    /// The table of `pairs`, duplicates sharing one slot.
    pub fn build<'a>(pairs: impl IntoIterator<Item = (ChannelId, &'a str)>) -> HealthSlots {
        let mut slots = HealthSlots::default();
        for (channel, model) in pairs {
            slots.slot_or_insert(channel, model);
        }
        slots
    }

    /// The slot of (channel, upstream model), adding it if new.
    pub(crate) fn slot_or_insert(&mut self, channel: ChannelId, upstream_model: &str) -> u32 {
        if let Some(slot) = self.slot(channel, upstream_model) {
            return slot;
        }
        // A snapshot never holds 4 billion members; saturate rather than wrap.
        let slot = u32::try_from(self.keys.len()).unwrap_or(u32::MAX);
        self.keys.push((channel, upstream_model.to_owned()));
        self.index
            .insert((channel, upstream_model.to_owned()), slot);
        slot
    }

    /// One hash probe, no allocation.
    pub fn slot(&self, channel: ChannelId, upstream_model: &str) -> Option<u32> {
        self.index
            .get(&HealthKeyRef(channel, upstream_model))
            .copied()
    }

    /// The keys in slot order.
    pub fn keys(&self) -> &[(ChannelId, String)] {
        &self.keys
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}
