//! Dense health slots: a view laid out for a snapshot's slots must give exactly the decisions of
//! the hash-lookup path, and a layout made for another snapshot must never be read.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod support;

use std::cell::Cell;
use std::sync::Arc;

use proptest::prelude::*;
use support::*;
use switchyard_engine::*;

const NOW: UnixMillis = 1_700_000_000_000;

/// Two routes over shared channels; some (channel, upstream model) pairs appear in both routes
/// and twice in one, so slots are shared; records differ per pair.
fn world(mode: RoutingMode, latencies: &[f64], propensities: &[f64]) -> World {
    let mut members = Vec::new();
    for id in 1..=12i64 {
        let mut m = member(
            id,
            id % 4 + 1,
            if id % 3 == 0 { 5 } else { 0 },
            (id % 5) as i32,
        );
        // 12 distinct (channel, model) pairs; the second route repeats them.
        m.upstream_model = format!("up-{}", id % 6);
        members.push(m);
    }
    let mut world = World::one_route(members.clone());
    world.route_mut().routing_mode = mode;
    let mut second = route(
        2,
        "other",
        members
            .iter()
            .map(|m| {
                let mut m = m.clone();
                m.id += 100;
                m
            })
            .collect(),
    );
    second.routing_mode = mode;
    world.routes.push(second);
    for (i, (&ms, &p)) in latencies.iter().zip(propensities).enumerate() {
        let channel = (i % 4) as ChannelId + 1;
        let model = format!("up-{}", i % 6);
        world.latency(channel, &model, ms);
        world.propensity(channel, &model, p);
    }
    world.cool(3, NOW + 1_000);
    world
}

/// Everything of a decision that health records feed: the pick, and per candidate its latency
/// and error factors, score and probability.
type Summary = (Option<MemberId>, Vec<(MemberId, f64, f64, f64, f64)>);

fn summary(d: &Decision<'_>) -> Summary {
    (
        d.selected().map(|c| c.member.id),
        d.candidates
            .iter()
            .map(|c| {
                (
                    c.member.id,
                    c.latency_factor,
                    c.error_factor,
                    c.score,
                    c.probability,
                )
            })
            .collect(),
    )
}

fn decide(snapshot: &Snapshot, health: &HealthSnapshot, model: &str, seed: u64) -> Summary {
    let mut rng = SplitMix64::new(seed);
    let d = select(
        snapshot,
        health,
        &SelectionConstraint::default(),
        model,
        NOW,
        &mut rng,
    );
    summary(&d)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn an_aligned_view_decides_exactly_like_the_hash_lookup(
        latencies in proptest::collection::vec(1.0f64..5_000.0, 0..24),
        propensities in proptest::collection::vec(0.0f64..1.0, 24),
        seed in any::<u64>(),
        mode in prop_oneof![
            Just(RoutingMode::Adaptive),
            Just(RoutingMode::Latency),
            Just(RoutingMode::Auto),
        ],
    ) {
        let world = world(mode, &latencies, &propensities);
        let snapshot = world.snapshot();
        let hashed = world.health.clone();
        let mut aligned = world.health.clone();
        aligned.align(&snapshot);
        prop_assert!(aligned.dense_health(snapshot.health_slots()).is_some());
        prop_assert!(hashed.dense_health(snapshot.health_slots()).is_none());
        for model in ["m", "other"] {
            prop_assert_eq!(
                decide(&snapshot, &aligned, model, seed),
                decide(&snapshot, &hashed, model, seed)
            );
        }
    }
}

#[test]
fn slots_are_shared_by_every_member_with_the_same_channel_and_model() {
    let world = world(RoutingMode::Adaptive, &[], &[]);
    let snapshot = world.snapshot();
    let slots = snapshot.health_slots();
    // 4 channels x 6 models, but member id and model index move together: id % 4 and id % 6
    // give 12 distinct pairs over ids 1..=12, and the second route repeats them exactly.
    assert_eq!(slots.len(), 12);
    for route in snapshot.routes() {
        for m in &route.members {
            let slot = slots.slot(m.channel_id, &m.upstream_model).unwrap();
            assert_eq!(
                slots.keys()[slot as usize],
                (m.channel_id, m.upstream_model.clone())
            );
        }
    }
    assert_eq!(slots.slot(99, "up-1"), None);
}

#[test]
fn a_layout_for_another_snapshot_is_never_read() {
    // Same parts, but a different snapshot object: its table is another allocation, so the
    // layout made for the first must not serve the second (the records could be in another
    // order after any change of members).
    let mut world = world(RoutingMode::Latency, &[100.0, 2_000.0, 40.0], &[0.0; 3]);
    let first = world.snapshot();
    world.health.align(&first);
    let second = world.snapshot();
    assert!(world.health.dense_health(first.health_slots()).is_some());
    assert!(world.health.dense_health(second.health_slots()).is_none());
}

#[test]
fn a_write_after_aligning_drops_the_layout_so_it_cannot_go_stale() {
    let mut world = world(RoutingMode::Latency, &[100.0, 2_000.0], &[0.0; 2]);
    let snapshot = world.snapshot();
    world.health.align(&snapshot);
    world.latency(2, "up-1", 9_000.0);
    assert!(world.health.dense_health(snapshot.health_slots()).is_none());
    // And the decision sees the new record (through the hash lookup).
    let d = {
        let mut rng = SplitMix64::new(1);
        select(
            &snapshot,
            &world.health,
            &SelectionConstraint::default(),
            "m",
            NOW,
            &mut rng,
        )
    };
    let one = d.candidates.iter().find(|c| c.member.id == 1).unwrap();
    // The latency factor is 3000 / (3000 + ms).
    assert!(
        (one.latency_factor - 0.25).abs() < 1e-9,
        "{}",
        one.latency_factor
    );
}

fn record(latency_ms: f64, error_propensity: f64) -> HealthRecord {
    HealthRecord {
        latency_ms: Some(latency_ms),
        error_propensity,
    }
}

#[test]
fn a_table_gives_each_distinct_pair_one_slot_in_first_seen_order() {
    let slots = HealthSlots::build([(2, "b"), (1, "a"), (2, "b"), (1, "b"), (1, "a")]);
    assert_eq!(
        slots.keys(),
        &[
            (2, "b".to_owned()),
            (1, "a".to_owned()),
            (1, "b".to_owned())
        ]
    );
    assert_eq!(slots.len(), 3);
    assert!(!slots.is_empty());
    assert_eq!(slots.slot(2, "b"), Some(0));
    assert_eq!(slots.slot(1, "a"), Some(1));
    assert_eq!(slots.slot(1, "b"), Some(2));
    // Same model on another channel, same channel with another model: not listed.
    assert_eq!(slots.slot(2, "a"), None);
    assert_eq!(slots.slot(1, "c"), None);

    let empty = HealthSlots::build(std::iter::empty());
    assert!(empty.is_empty());
    assert_eq!(empty.len(), 0);
    assert!(empty.keys().is_empty());
}

#[test]
fn a_view_that_keeps_no_layout_offers_none() {
    // The trait's default: no copy, so the engine must use `health` (an empty or short slice
    // would claim a layout whose slots do not hold the view's records).
    let slots = Arc::new(HealthSlots::build([(1, "a"), (2, "b")]));
    assert!(NoHealth.dense_health(&slots).is_none());
    assert!(HealthSnapshot::default().dense_health(&slots).is_none());
}

#[test]
fn a_dense_copy_follows_set_and_remove_for_the_pairs_its_table_lists() {
    let slots = Arc::new(HealthSlots::build([(1, "a"), (2, "b")]));
    let mut dense = DenseHealth::default();
    assert!(dense.records_for(&slots).is_none());

    dense.align(&slots, |channel, model| {
        if (channel, model) == (2, "b") {
            record(300.0, 0.5)
        } else {
            HealthRecord::default()
        }
    });
    let expect = [HealthRecord::default(), record(300.0, 0.5)];
    assert_eq!(dense.records_for(&slots), Some(&expect[..]));

    dense.set(1, "a", record(50.0, 0.0));
    // Not in the table: no slot changes.
    dense.set(9, "z", record(1.0, 1.0));
    let expect = [record(50.0, 0.0), record(300.0, 0.5)];
    assert_eq!(dense.records_for(&slots), Some(&expect[..]));

    dense.remove(2, "b");
    let expect = [record(50.0, 0.0), HealthRecord::default()];
    assert_eq!(dense.records_for(&slots), Some(&expect[..]));

    // Another table with the same pairs is another layout: not served.
    let same_pairs = Arc::new(HealthSlots::build([(1, "a"), (2, "b")]));
    assert!(dense.records_for(&same_pairs).is_none());

    dense.clear();
    assert!(dense.records_for(&slots).is_none());
}

/// A view that keeps its records laid out for one table, and counts the lookups by hash.
struct LaidOut {
    slots: Arc<HealthSlots>,
    records: Vec<HealthRecord>,
    hash_lookups: Cell<usize>,
}

impl HealthView for LaidOut {
    fn health(&self, channel: ChannelId, upstream_model: &str) -> HealthRecord {
        self.hash_lookups.set(self.hash_lookups.get() + 1);
        self.slots
            .slot(channel, upstream_model)
            .map(|s| self.records[s as usize])
            .unwrap_or_default()
    }
    fn dense_health(&self, slots: &Arc<HealthSlots>) -> Option<&[HealthRecord]> {
        Arc::ptr_eq(&self.slots, slots).then_some(self.records.as_slice())
    }
}

#[test]
fn every_aware_mode_reads_a_laid_out_view_by_slot_without_hash_lookups() {
    // (mode, latency aware, error aware): error awareness alone comes from the settings.
    let cases = [
        (RoutingMode::Latency, false, true, false),
        (RoutingMode::Adaptive, false, true, true),
        (RoutingMode::Auto, true, false, true),
    ];
    for (mode, error_setting, latency_aware, error_aware) in cases {
        let mut world = World::one_route(vec![member(1, 1, 0, 1), member(2, 2, 0, 1)]);
        world.route_mut().routing_mode = mode;
        world.settings.error_aware_enabled = error_setting;
        let snapshot = world.snapshot();
        let slots = Arc::clone(snapshot.health_slots());
        let records = slots
            .keys()
            .iter()
            .map(|(channel, _)| {
                if *channel == 1 {
                    record(1_000.0, 0.5)
                } else {
                    record(3_000.0, 0.0)
                }
            })
            .collect();
        let view = LaidOut {
            slots,
            records,
            hash_lookups: Cell::new(0),
        };
        let mut rng = SplitMix64::new(7);
        let d = select(
            &snapshot,
            &view,
            &SelectionConstraint::default(),
            "m",
            NOW,
            &mut rng,
        );
        assert_eq!(view.hash_lookups.get(), 0, "{mode:?}");
        let one = d.candidates.iter().find(|c| c.member.id == 1).unwrap();
        let two = d.candidates.iter().find(|c| c.member.id == 2).unwrap();
        // The records came from the layout: the factors tell the two channels apart.
        if latency_aware {
            assert!(one.latency_factor > two.latency_factor, "{mode:?}");
        }
        if error_aware {
            assert!(one.error_factor < two.error_factor, "{mode:?}");
        }
    }
}
