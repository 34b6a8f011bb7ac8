//! Dense health slots: a view laid out for a snapshot's slots must give exactly the decisions of
//! the hash-lookup path, and a layout made for another snapshot must never be read.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod support;

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
