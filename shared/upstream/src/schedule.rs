//! When to probe what: the per-channel (or per-credential) recovery probe schedule both planes
//! follow. Pure: time is an argument and the jitter comes from an injected [`RandomSource`].
//!
//! - A channel that starts needing probes is first probed at a jittered instant within one
//!   `recovery_probe_interval_seconds` of when it was first seen, so channels that tripped
//!   together (an upstream outage) are not all probed at the same instant.
//! - Each failed probe doubles the delay before the next one: 2×, 4×, then 8× the interval,
//!   which is the cap ([`MAX_BACKOFF_FACTOR`]).
//! - A passed probe forgets the channel: should it trip again, it starts over.

use std::collections::HashMap;
use std::hash::Hash;

use switchyard_engine::{ChannelId, CredentialId, RandomSource, SplitMix64, UnixMillis};

/// The longest delay between two probes of one channel, in intervals.
pub const MAX_BACKOFF_FACTOR: u64 = 8;

/// The delay before the next probe after `failures` failed probes in a row:
/// `interval × min(2^failures, 8)` (`failures` 0: one interval).
pub fn backoff_ms(interval_ms: u64, failures: u32) -> u64 {
    let factor = 1u64
        .checked_shl(failures)
        .unwrap_or(u64::MAX)
        .min(MAX_BACKOFF_FACTOR);
    interval_ms.saturating_mul(factor)
}

/// The first probe of something first seen at `now`: `now + interval × jitter`, with `jitter`
/// in `[0, 1)` (clamped).
pub fn first_probe_at(now: UnixMillis, interval_ms: u64, jitter: f64) -> UnixMillis {
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let offset = (interval_ms as f64 * jitter) as u64;
    now.saturating_add(offset.min(interval_ms))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    next_at: UnixMillis,
    failures: u32,
}

/// Next probe time and failure streak per key (a channel id, or a credential id).
#[derive(Debug, Clone)]
pub struct ProbeSchedule<K> {
    entries: HashMap<K, Entry>,
}

impl<K> Default for ProbeSchedule<K> {
    fn default() -> Self {
        ProbeSchedule {
            entries: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash> ProbeSchedule<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `key` (which needs probing) is due at `now`. A key seen for the first time is
    /// scheduled at [`first_probe_at`] with a jitter drawn from `rng`.
    pub fn due(
        &mut self,
        key: K,
        now: UnixMillis,
        interval_ms: u64,
        rng: &mut dyn RandomSource,
    ) -> bool {
        let entry = self.entries.entry(key).or_insert_with(|| Entry {
            next_at: first_probe_at(now, interval_ms, rng.next_f64()),
            failures: 0,
        });
        entry.next_at <= now
    }

    /// A probe of `key` failed at `now`: the next one waits [`backoff_ms`]. Returns when.
    pub fn failed(&mut self, key: K, now: UnixMillis, interval_ms: u64) -> UnixMillis {
        let entry = self.entries.entry(key).or_insert(Entry {
            next_at: now,
            failures: 0,
        });
        entry.failures = entry.failures.saturating_add(1);
        entry.next_at = now.saturating_add(backoff_ms(interval_ms, entry.failures));
        entry.next_at
    }

    /// Records a probe's outcome at `now`: see [`ProbeSchedule::passed`] and
    /// [`ProbeSchedule::failed`].
    pub fn record(&mut self, key: K, passed: bool, now: UnixMillis, interval_ms: u64) {
        if passed {
            self.passed(key);
        } else {
            self.failed(key, now, interval_ms);
        }
    }

    /// Of `needed` (what needs a probe now), what `due` lets a round probe, in `needed`'s order;
    /// the schedule forgets every key no longer needed.
    pub fn filter_due(&mut self, due: Due, needed: Vec<K>, rng: &mut dyn RandomSource) -> Vec<K> {
        let set: std::collections::HashSet<K> = needed.iter().copied().collect();
        self.retain(|k| set.contains(k));
        match due {
            Due::All => needed,
            Due::Scheduled { now, interval_ms } => needed
                .into_iter()
                .filter(|k| self.due(*k, now, interval_ms, rng))
                .collect(),
        }
    }

    /// A probe of `key` passed: it is forgotten (a later trip starts a fresh schedule).
    pub fn passed(&mut self, key: K) {
        self.entries.remove(&key);
    }

    /// Forgets every key `needed` rejects (recovered otherwise, deleted, disabled by hand).
    pub fn retain(&mut self, mut needed: impl FnMut(&K) -> bool) {
        self.entries.retain(|k, _| needed(k));
    }

    /// When `key` is next due, if it is scheduled.
    pub fn next_at(&self, key: K) -> Option<UnixMillis> {
        self.entries.get(&key).map(|e| e.next_at)
    }

    /// Failed probes of `key` in a row.
    pub fn failures(&self, key: K) -> u32 {
        self.entries.get(&key).map_or(0, |e| e.failures)
    }
}

/// Which of the things that need a probe a round probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Every one (an on-demand round: tests, drills).
    All,
    /// Those whose scheduled time has come at `now`.
    Scheduled { now: UnixMillis, interval_ms: u64 },
}

/// One prober's schedules: each channel and each runtime-disabled credential probed on its own
/// (jittered first probe, doubling backoff on failure). Both planes' probers keep one.
#[derive(Debug, Clone)]
pub struct ProbeSchedules {
    pub channels: ProbeSchedule<ChannelId>,
    pub credentials: ProbeSchedule<CredentialId>,
    jitter: SplitMix64,
}

impl ProbeSchedules {
    /// Empty schedules whose first-probe jitter is drawn from a generator seeded with `seed`.
    pub fn new(seed: u64) -> ProbeSchedules {
        ProbeSchedules {
            channels: ProbeSchedule::new(),
            credentials: ProbeSchedule::new(),
            jitter: SplitMix64::new(seed),
        }
    }

    /// [`ProbeSchedule::filter_due`] over the channels.
    pub fn due_channels(&mut self, due: Due, needed: Vec<ChannelId>) -> Vec<ChannelId> {
        self.channels.filter_due(due, needed, &mut self.jitter)
    }

    /// [`ProbeSchedule::filter_due`] over the credentials.
    pub fn due_credentials(&mut self, due: Due, needed: Vec<CredentialId>) -> Vec<CredentialId> {
        self.credentials.filter_due(due, needed, &mut self.jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::SplitMix64;

    /// Replays fixed unit-interval draws.
    struct Fixed(Vec<f64>);

    impl RandomSource for Fixed {
        fn next_u64(&mut self) -> u64 {
            let x = if self.0.is_empty() {
                0.0
            } else {
                self.0.remove(0)
            };
            // The inverse of `next_f64`: the top 53 bits carry the fraction.
            ((x * (1u64 << 53) as f64) as u64) << 11
        }
    }

    const I: u64 = 10_000;

    #[test]
    fn backoff_doubles_and_caps_at_eight_intervals() {
        let delays: Vec<u64> = (0..6).map(|n| backoff_ms(I, n)).collect();
        assert_eq!(delays, [I, 2 * I, 4 * I, 8 * I, 8 * I, 8 * I]);
        assert_eq!(backoff_ms(I, u32::MAX), 8 * I);
        assert_eq!(backoff_ms(u64::MAX, 3), u64::MAX);
    }

    #[test]
    fn first_probe_is_spread_within_one_interval() {
        assert_eq!(first_probe_at(1_000, I, 0.0), 1_000);
        assert_eq!(first_probe_at(1_000, I, 0.25), 1_000 + I / 4);
        assert_eq!(first_probe_at(1_000, I, 0.999_999), 1_000 + I - 1);
        assert_eq!(first_probe_at(1_000, I, 7.0), 1_000 + I);
        assert_eq!(first_probe_at(1_000, I, f64::NAN), 1_000);
    }

    #[test]
    fn a_failing_channel_is_probed_ever_less_often_until_it_passes() {
        let mut s = ProbeSchedule::new();
        let mut rng = Fixed(vec![0.5, 0.0]);
        let t0 = 100_000;
        assert!(
            !s.due(7, t0, I, &mut rng),
            "first probe half an interval in"
        );
        assert_eq!(s.next_at(7), Some(t0 + I / 2));
        let mut now = t0 + I / 2;
        assert!(s.due(7, now, I, &mut rng));
        let mut gaps = Vec::new();
        for _ in 0..5 {
            let next = s.failed(7, now, I);
            assert!(!s.due(7, next - 1, I, &mut rng));
            assert!(s.due(7, next, I, &mut rng));
            gaps.push(next - now);
            now = next;
        }
        assert_eq!(gaps, [2 * I, 4 * I, 8 * I, 8 * I, 8 * I]);
        assert_eq!(s.failures(7), 5);
        // A pass resets it: the next trip starts over with a fresh jittered first probe.
        s.passed(7);
        assert_eq!(s.failures(7), 0);
        assert!(s.due(7, now, I, &mut rng), "jitter 0.0: due at once");
        let next = s.failed(7, now, I);
        assert_eq!(next - now, 2 * I);
    }

    #[test]
    fn channels_seen_together_are_spread_over_the_interval() {
        let mut s = ProbeSchedule::new();
        let mut rng = SplitMix64::new(42);
        let now = 5_000_000;
        for channel in 0..200i64 {
            s.due(channel, now, I, &mut rng);
        }
        let mut offsets: Vec<u64> = (0..200i64)
            .map(|c| s.next_at(c).unwrap_or(0) - now)
            .collect();
        assert!(offsets.iter().all(|o| *o <= I));
        offsets.sort_unstable();
        offsets.dedup();
        assert!(
            offsets.len() > 150,
            "{} distinct start times",
            offsets.len()
        );
        // Every tenth of the interval gets some channels.
        for decile in 0..10 {
            let lo = decile * I / 10;
            assert!(
                offsets.iter().any(|o| (lo..lo + I / 10).contains(o)),
                "no channel starts in decile {decile}"
            );
        }
    }

    #[test]
    fn retain_forgets_what_no_longer_needs_probing() {
        let mut s = ProbeSchedule::new();
        let mut rng = Fixed(vec![]);
        s.due(1, 0, I, &mut rng);
        s.due(2, 0, I, &mut rng);
        s.failed(2, 0, I);
        s.retain(|k| *k == 1);
        assert_eq!(s.next_at(2), None);
        assert_eq!(s.failures(2), 0);
        assert!(s.next_at(1).is_some());
    }

    #[test]
    fn a_round_probes_what_is_due_and_forgets_what_is_no_longer_needed() {
        let mut s = ProbeSchedules::new(1);
        let now = 1_000_000;
        // Three channels need probes; on demand, every one is probed (and none scheduled).
        assert_eq!(s.due_channels(Due::All, vec![3, 1, 2]), [3, 1, 2]);
        // Scheduled: jittered first probes, none due before its instant, each due by one interval.
        let scheduled = Due::Scheduled {
            now,
            interval_ms: I,
        };
        let first = s.due_channels(scheduled, vec![3, 1, 2]);
        let later = Due::Scheduled {
            now: now + I,
            interval_ms: I,
        };
        assert_eq!(s.due_channels(later, vec![3, 1, 2]), [3, 1, 2]);
        assert!(first
            .iter()
            .all(|c| s.channels.next_at(*c).is_some_and(|t| t <= now)));
        // Channel 1 failed its probe: not due again until the backoff has passed.
        s.channels.record(1, false, now + I, I);
        assert_eq!(s.channels.failures(1), 1);
        assert_eq!(s.due_channels(later, vec![3, 1, 2]), [3, 2]);
        // Channel 2 passed and channel 3 is no longer needed: both forgotten.
        s.channels.record(2, true, now + I, I);
        assert_eq!(s.channels.next_at(2), None);
        assert!(s.due_channels(later, vec![1]).is_empty());
        assert_eq!(s.channels.next_at(3), None, "no longer needed: forgotten");
        assert_eq!(s.channels.failures(1), 1, "still needed: kept");
        // On demand, too, forgets what is not needed.
        assert_eq!(s.due_channels(Due::All, Vec::new()), Vec::<i64>::new());
        assert_eq!(s.channels.next_at(1), None);
        // Credentials keep their own schedule.
        assert_eq!(s.due_credentials(Due::All, vec![9]), [9]);
        assert!(s.credentials.next_at(9).is_none());
    }
}
