//! The health view the engine reads (cooldowns, health records, in-flight counts, breakers,
//! sticky bindings) and the pure update rules that state stores apply to health records, so
//! every store computes them the same way.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::fxhash::{FxBuildHasher, FxHashMap};
use crate::ids::{ChannelId, CredentialId, MemberId, RouteId, UnixMillis};
use crate::model::Snapshot;
use crate::slots::{HealthKeyRef, HealthSlots};

/// EWMA smoothing factor for latency samples.
pub const LATENCY_ALPHA: f64 = 0.2;

/// Latency and error history of one (channel, upstream model).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HealthRecord {
    /// EWMA of successful responses' latency (time to first byte for streams). `None`: no sample.
    pub latency_ms: Option<f64>,
    /// 0..=1; rises toward 1 on failures and decays on successes.
    pub error_propensity: f64,
}

impl HealthRecord {
    /// A successful response after `latency_ms`: first sample taken as is, then EWMA (α = 0.2);
    /// error propensity halves.
    pub fn on_success(self, latency_ms: f64) -> HealthRecord {
        let latency_ms = sanitize_latency(latency_ms);
        HealthRecord {
            latency_ms: Some(match self.latency_ms {
                Some(prev) if prev.is_finite() => {
                    LATENCY_ALPHA * latency_ms + (1.0 - LATENCY_ALPHA) * prev
                }
                _ => latency_ms,
            }),
            error_propensity: clamp_unit(0.5 * self.error_propensity),
        }
    }

    /// A failed attempt: propensity becomes `0.5 + 0.5 × p` (first failure 0.5, third 0.875).
    pub fn on_failure(self) -> HealthRecord {
        HealthRecord {
            latency_ms: self.latency_ms,
            error_propensity: clamp_unit(0.5 + 0.5 * clamp_unit(self.error_propensity)),
        }
    }
}

fn sanitize_latency(ms: f64) -> f64 {
    if ms.is_finite() && ms >= 0.0 {
        ms
    } else {
        0.0
    }
}

/// Bad health data (NaN, out of range) never breaks selection: it is clamped here.
pub(crate) fn clamp_unit(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

/// A session's binding to a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StickyBinding {
    pub member_id: MemberId,
    pub expires_at: UnixMillis,
}

/// A channel in its slow-start window after a passed recovery probe: its members' selection
/// weight ramps linearly from the initial share at `since` to full weight at `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovering {
    /// Unix ms the probe passed.
    pub since: UnixMillis,
    /// Unix ms the ramp ends (the channel is then simply healthy).
    pub until: UnixMillis,
}

impl Recovering {
    /// Still inside the window at `now`.
    pub fn active(&self, now: UnixMillis) -> bool {
        now < self.until
    }

    /// The factor a member's selection weight is multiplied by at `now`:
    /// `initial + (1 − initial) × elapsed / window`, clamped to `[initial, 1]`, with `initial`
    /// = `initial_percent` / 100 (itself clamped to `[0.01, 1]`). 1 once the window is over.
    pub fn ramp_factor(&self, now: UnixMillis, initial_percent: u32) -> f64 {
        if !self.active(now) {
            return 1.0;
        }
        let initial = (f64::from(initial_percent) / 100.0).clamp(0.01, 1.0);
        let window = self.until.saturating_sub(self.since);
        if window == 0 {
            return 1.0;
        }
        let elapsed = now.saturating_sub(self.since);
        let progress = elapsed as f64 / window as f64;
        (initial + (1.0 - initial) * progress).clamp(initial, 1.0)
    }

    /// Whole seconds left of the window at `now` (rounded up; 0 when over).
    pub fn seconds_left(&self, now: UnixMillis) -> u64 {
        self.until.saturating_sub(now).div_ceil(1000)
    }
}

/// What the engine needs to know about live runtime state. Implemented by the state stores'
/// local views (hot path: plain memory reads) and by [`HealthSnapshot`] (tests, explain).
///
/// Every method has a neutral default, so a view only implements what it tracks.
pub trait HealthView {
    /// When the member's cooldown ends, if it has one (may be in the past).
    fn cooldown_until(&self, _member: MemberId) -> Option<UnixMillis> {
        None
    }
    fn health(&self, _channel: ChannelId, _upstream_model: &str) -> HealthRecord {
        HealthRecord::default()
    }
    /// The view's health records laid out in the slot order of `slots` (one snapshot's, see
    /// [`HealthSlots`]), if it keeps such a copy for exactly that table; slot `i` must hold what
    /// `health` returns for `slots.keys()[i]`. The engine then indexes this array instead of
    /// calling `health` per candidate, and falls back to `health` when it gets `None`.
    fn dense_health(&self, _slots: &Arc<HealthSlots>) -> Option<&[HealthRecord]> {
        None
    }
    /// Requests in flight on the channel, fleet-wide.
    fn in_flight(&self, _channel: ChannelId) -> u32 {
        0
    }
    /// The channel's breaker has tripped (shared state, ahead of the snapshot's status).
    fn breaker_open(&self, _channel: ChannelId) -> bool {
        false
    }
    /// The channel's slow-start window after a passed probe, if it has one (may be over).
    fn recovering(&self, _channel: ChannelId) -> Option<Recovering> {
        None
    }
    /// The credential was disabled at runtime (a keyword rule on a multi-key channel).
    fn credential_disabled(&self, _credential: CredentialId) -> bool {
        false
    }
    /// The canary member has earned promotion to the stable pool.
    fn canary_promoted(&self, _member: MemberId) -> bool {
        false
    }
    /// The session's binding on this route, if any (may be expired).
    fn sticky(&self, _route: RouteId, _session_key: &str) -> Option<StickyBinding> {
        None
    }
}

/// Health records keyed by (channel, upstream model), looked up without allocating through
/// [`health_record`].
pub type HealthRecords = hashbrown::HashMap<(ChannelId, String), HealthRecord, FxBuildHasher>;

/// One hash probe, no allocation: the hot-path lookup every health view should use.
pub fn health_record(
    records: &HealthRecords,
    channel: ChannelId,
    upstream_model: &str,
) -> Option<HealthRecord> {
    records.get(&HealthKeyRef(channel, upstream_model)).copied()
}

/// A view's copy of its health records in one [`HealthSlots`] order. The owner keeps it in step:
/// `align` when a new snapshot is installed, `set` / `remove` beside every write of a record.
#[derive(Debug, Clone, Default)]
pub struct DenseHealth {
    slots: Option<Arc<HealthSlots>>,
    records: Vec<HealthRecord>,
}

impl DenseHealth {
    /// Lays the records out for `slots`, reading each one's current value from `current`.
    pub fn align(
        &mut self,
        slots: &Arc<HealthSlots>,
        mut current: impl FnMut(ChannelId, &str) -> HealthRecord,
    ) {
        self.records.clear();
        self.records
            .extend(slots.keys().iter().map(|(c, m)| current(*c, m)));
        self.slots = Some(Arc::clone(slots));
    }

    /// The record of (channel, upstream model) is now `record`.
    pub fn set(&mut self, channel: ChannelId, upstream_model: &str, record: HealthRecord) {
        if let Some(slots) = &self.slots {
            if let Some(at) = slots.slot(channel, upstream_model) {
                if let Some(slot) = self.records.get_mut(at as usize) {
                    *slot = record;
                }
            }
        }
    }

    /// The record of (channel, upstream model) is gone (back to the default).
    pub fn remove(&mut self, channel: ChannelId, upstream_model: &str) {
        self.set(channel, upstream_model, HealthRecord::default());
    }

    /// Forgets the layout (the records it mirrored were replaced wholesale).
    pub fn clear(&mut self) {
        self.slots = None;
        self.records.clear();
    }

    /// The records, if they are laid out for exactly this table (the same `Arc`).
    pub fn records_for(&self, slots: &Arc<HealthSlots>) -> Option<&[HealthRecord]> {
        match &self.slots {
            Some(mine) if Arc::ptr_eq(mine, slots) => Some(&self.records),
            _ => None,
        }
    }
}

/// A plain-data health view: what tests and benches build, and what a store can copy out.
#[derive(Debug, Clone, Default)]
pub struct HealthSnapshot {
    pub cooldowns: FxHashMap<MemberId, UnixMillis>,
    pub health: HealthRecords,
    pub in_flight: FxHashMap<ChannelId, u32>,
    pub breakers_open: Vec<ChannelId>,
    pub recovering: FxHashMap<ChannelId, Recovering>,
    pub credentials_disabled: Vec<CredentialId>,
    pub canaries_promoted: Vec<MemberId>,
    /// route -> session key -> binding.
    pub sticky: FxHashMap<RouteId, FxHashMap<String, StickyBinding>>,
    /// `health` laid out for one snapshot, made by [`HealthSnapshot::align`] and dropped by
    /// [`HealthSnapshot::record_mut`]; write `health` directly only before aligning.
    dense: DenseHealth,
}

impl HealthSnapshot {
    /// Lays the health records out for `snapshot`'s slots, as a store does when a snapshot is
    /// installed, so aware selection over that snapshot reads them by slot.
    pub fn align(&mut self, snapshot: &Snapshot) {
        let records = &self.health;
        self.dense.align(snapshot.health_slots(), |channel, model| {
            health_record(records, channel, model).unwrap_or_default()
        });
    }

    pub fn record_mut(&mut self, channel: ChannelId, upstream_model: &str) -> &mut HealthRecord {
        self.dense.clear();
        self.health
            .entry((channel, upstream_model.to_owned()))
            .or_default()
    }

    pub fn bind(&mut self, route: RouteId, session_key: &str, binding: StickyBinding) {
        self.sticky
            .entry(route)
            .or_default()
            .insert(session_key.to_owned(), binding);
    }
}

impl HealthView for HealthSnapshot {
    fn cooldown_until(&self, member: MemberId) -> Option<UnixMillis> {
        self.cooldowns.get(&member).copied()
    }
    fn health(&self, channel: ChannelId, upstream_model: &str) -> HealthRecord {
        health_record(&self.health, channel, upstream_model).unwrap_or_default()
    }
    fn dense_health(&self, slots: &Arc<HealthSlots>) -> Option<&[HealthRecord]> {
        self.dense.records_for(slots)
    }
    fn in_flight(&self, channel: ChannelId) -> u32 {
        self.in_flight.get(&channel).copied().unwrap_or(0)
    }
    fn breaker_open(&self, channel: ChannelId) -> bool {
        self.breakers_open.contains(&channel)
    }
    fn recovering(&self, channel: ChannelId) -> Option<Recovering> {
        self.recovering.get(&channel).copied()
    }
    fn credential_disabled(&self, credential: CredentialId) -> bool {
        self.credentials_disabled.contains(&credential)
    }
    fn canary_promoted(&self, member: MemberId) -> bool {
        self.canaries_promoted.contains(&member)
    }
    fn sticky(&self, route: RouteId, session_key: &str) -> Option<StickyBinding> {
        self.sticky.get(&route)?.get(session_key).copied()
    }
}

/// No state at all: nothing cooling, no samples, nothing in flight.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHealth;

impl HealthView for NoHealth {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_propensity_follows_the_spec_sequence() {
        let r = HealthRecord::default();
        let r1 = r.on_failure();
        assert_eq!(r1.error_propensity, 0.5);
        let r3 = r1.on_failure().on_failure();
        assert_eq!(r3.error_propensity, 0.875);
        assert_eq!(r3.on_success(10.0).error_propensity, 0.4375);
    }

    #[test]
    fn latency_ewma_takes_first_sample_as_is() {
        let r = HealthRecord::default().on_success(1000.0);
        assert_eq!(r.latency_ms, Some(1000.0));
        let r = r.on_success(0.0);
        assert_eq!(r.latency_ms, Some(800.0));
    }

    #[test]
    fn ramp_factor_is_linear_from_the_initial_share_to_one() {
        let r = Recovering {
            since: 10_000,
            until: 70_000,
        };
        assert_eq!(r.ramp_factor(10_000, 10), 0.1);
        assert!((r.ramp_factor(40_000, 10) - 0.55).abs() < 1e-12);
        assert_eq!(r.ramp_factor(70_000, 10), 1.0);
        assert_eq!(r.ramp_factor(99_000, 10), 1.0);
        // A clock behind the start (another host's) never goes below the initial share.
        assert_eq!(r.ramp_factor(5_000, 10), 0.1);
        assert_eq!(r.seconds_left(40_000), 30);
        assert_eq!(r.seconds_left(69_001), 1);
        assert_eq!(r.seconds_left(80_000), 0);
    }

    #[test]
    fn garbage_latency_never_poisons_the_record() {
        let r = HealthRecord::default().on_success(f64::NAN);
        assert_eq!(r.latency_ms, Some(0.0));
        let r = r.on_success(-5.0);
        assert_eq!(r.latency_ms, Some(0.0));
    }

    #[test]
    fn a_non_finite_previous_latency_is_replaced_by_the_new_sample() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let r = HealthRecord {
                latency_ms: Some(bad),
                error_propensity: 0.0,
            };
            assert_eq!(r.on_success(200.0).latency_ms, Some(200.0), "{bad}");
        }
    }

    #[test]
    fn a_view_that_tracks_nothing_is_neutral() {
        let view = NoHealth;
        assert_eq!(view.cooldown_until(1), None);
        assert_eq!(view.health(1, "m"), HealthRecord::default());
        assert_eq!(view.in_flight(1), 0);
        assert!(!view.breaker_open(1));
        assert_eq!(view.recovering(1), None);
        assert!(!view.credential_disabled(1));
        assert!(!view.canary_promoted(1));
        assert_eq!(view.sticky(1, "s"), None);
    }

    #[test]
    fn health_record_finds_exactly_the_stored_key() {
        // Enough keys that lookups of absent ones probe slots whose hash tag collides: only an
        // exact (channel, model) match may answer.
        let mut records = HealthRecords::default();
        for i in 0..500u32 {
            let record = HealthRecord {
                latency_ms: Some(f64::from(i)),
                error_propensity: 0.0,
            };
            records.insert((1, format!("m{i}")), record);
            records.insert((i64::from(i) + 2, "shared".to_owned()), record);
        }
        for i in 0..500u32 {
            let want = Some(f64::from(i));
            let got = health_record(&records, 1, &format!("m{i}")).map(|r| r.latency_ms);
            assert_eq!(got, Some(want), "m{i}");
            let got = health_record(&records, i64::from(i) + 2, "shared").map(|r| r.latency_ms);
            assert_eq!(got, Some(want), "channel {}", i + 2);
            // Same channel, another model; same model, another channel: neither matches.
            assert_eq!(health_record(&records, 1, &format!("x{i}")), None, "x{i}");
            assert_eq!(health_record(&records, i64::from(i) + 1000, "shared"), None);
        }
    }
}
