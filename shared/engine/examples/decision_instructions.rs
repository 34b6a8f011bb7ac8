//! Runs a fixed number of decisions so `valgrind --tool=callgrind` can count the instructions of
//! one decision — a figure that, unlike wall time, does not move when the machine is busy:
//!
//! valgrind --tool=callgrind --toggle-collect='switchyard_engine::select::select*' \
//!     target/release/examples/decision_instructions weighted 512 [unaligned]
//!
//! `unaligned`: the health view is not laid out for the snapshot's slots (the hash-lookup path).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // measurement tool

#[path = "../benches/world.rs"]
mod world;

use switchyard_engine::*;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = RoutingMode::parse(&args.next().unwrap_or_else(|| "weighted".into())).unwrap();
    let members: i64 = args.next().map(|n| n.parse().unwrap()).unwrap_or(8);
    let runs: u64 = 1_000;
    let unaligned = args.next().as_deref() == Some("unaligned");
    let (snapshot, health) = if unaligned {
        world::world_unaligned(members, mode)
    } else {
        world::world(members, mode)
    };
    let constraint = SelectionConstraint::default();
    let mut rng = SplitMix64::new(7);
    let mut picked = 0i64;
    for _ in 0..runs {
        let d = select(
            &snapshot,
            &health,
            &constraint,
            std::hint::black_box("gpt-4o"),
            world::NOW,
            &mut rng,
        );
        picked += d.selected().map_or(0, |c| c.member.id);
    }
    println!(
        "{runs} decisions, {members} members, {}{}: checksum {picked}",
        mode.as_str(),
        if unaligned { " (unaligned view)" } else { "" }
    );
}
