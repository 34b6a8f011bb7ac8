//! Limits and budgets, fleet-wide without a round trip on the request path.
//!
//! A [`Limit`] is identified by a [`LimitKey`] (scope kind and id, metric, window) and carries a
//! value and a mode (hard refuses, soft only reports). The request path calls
//! [`crate::StateStore::limit_take`] once with every limit that applies to the request: it checks
//! and takes them all at once against local memory (never awaiting), and says which hard limit
//! refused, which soft ones the request went past, and what OpenAI's `x-ratelimit-*` headers and
//! `Retry-After` need.
//!
//! One [`Limiter`] table holds, per limit key, the current window's local consumption (`used`),
//! the allowance this proxy has claimed from the fleet for that window (`granted`) and the fleet
//! counter as last seen (`fleet`). The in-memory store is its own authority ([`Authority::Exact`]:
//! admitted iff `used + amount <= value`). A fleet store ([`Authority::Fleet`]) admits from the
//! claimed allowance plus at most one allowance of credit while the fleet, as last seen, has room
//! for it; its background task claims more (and charges the credit) before the allowance runs out.
//! The overshoot bound and its argument: docs/src/concepts/inside-engine-state.md ("The overshoot
//! bound").

use std::sync::{Mutex, MutexGuard};

use serde::Serialize;
use switchyard_engine::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};
pub use switchyard_engine::limit::{Limit, LimitKey, LimitMode, Metric, ScopeKind, Window};
use switchyard_engine::UnixMillis;

/// Most limits whose soft crossing an [`Admission`] reports (bit `i` = `limits[i]`); further
/// limits of the same request are still enforced.
pub const MAX_REPORTED_LIMITS: usize = 64;

/// `Retry-After` of a refusal that more room can end at any time (a concurrency slot, an
/// allowance refill): one second.
pub const RETRY_SOON_MS: u64 = 1_000;

/// Everything one request asks of its limits.
#[derive(Debug, Clone, Copy)]
pub struct LimitRequest<'a> {
    /// Every limit that applies (token, team, route, …), hard and soft together.
    pub limits: &'a [Limit],
    /// The token estimate taken from `tokens` limits (corrected later by
    /// [`crate::StateStore::limit_settle`]).
    pub tokens: u64,
}

/// What OpenAI's `x-ratelimit-{limit,remaining,reset}-*` headers of one metric say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RateHeader {
    pub limit: u64,
    pub remaining: u64,
    /// Unix ms the window ends (the count starts over).
    pub reset_at: UnixMillis,
}

/// The hard limit that refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// Index into [`LimitRequest::limits`].
    pub index: usize,
    /// How long until there is room (for `Retry-After`, in ms; at least 1).
    pub retry_after_ms: u64,
}

/// The answer of [`crate::StateStore::limit_take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Admission {
    /// `None`: admitted, and every limit was taken. `Some`: nothing was taken. When several hard
    /// limits lack room, the one whose room comes back last.
    pub refused: Option<Refusal>,
    /// Bit `i`: the admitted request is beyond soft limit `limits[i]`.
    pub soft_over: u64,
    /// Bit `i`: this request crossed soft limit `limits[i]` (it was within it before, as far as
    /// this proxy knows): the one to record an event for.
    pub soft_crossed: u64,
    /// The tightest `requests` limit (least remaining), after this request.
    pub requests: Option<RateHeader>,
    /// The tightest `tokens` limit (least remaining), after this request.
    pub tokens: Option<RateHeader>,
}

impl Admission {
    pub fn admitted(&self) -> bool {
        self.refused.is_none()
    }
}

/// One limit's state as this proxy sees it (budgets, gauges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LimitStatus {
    /// Taken in the current window (fleet-wide as far as this proxy knows).
    pub used: u64,
    pub remaining: u64,
    /// When the window ends; `None` for `concurrent`.
    pub reset_at: Option<UnixMillis>,
}

/// The allowance a proxy claims at a time and may run ahead of its claims by: a hundredth of
/// the limit shared among the live proxies, at least 1, and at least the largest single take
/// this proxy has seen for the limit (so one request always fits).
pub fn allowance(value: u64, live: u32, largest_take: u64) -> u64 {
    (value / (100 * u64::from(live.max(1))))
        .max(1)
        .max(largest_take)
}

/// Who decides whether a limit has room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Authority {
    /// This table is the only one (single node): exact counts.
    Exact,
    /// One proxy of a fleet. `connected`: the shared counter is reachable; `live`: the live
    /// proxies last seen (this one included).
    Fleet { connected: bool, live: u32 },
}

/// One limit key's local state. A rolling window's slot is its current day bucket: `before`
/// holds what the earlier days of the window took, and the bucket's room is the rest.
#[derive(Debug, Clone, Default)]
struct Slot {
    /// What this window (a rolling window: its current day) may still take in all:
    /// `configured − before`.
    value: u64,
    /// The limit as configured.
    configured: u64,
    /// A rolling window: taken fleet-wide in its earlier days (the shared counters' sum as the
    /// last claim saw it; this proxy's own record of those days before any claim). Else 0.
    before: u64,
    window_start: UnixMillis,
    window_end: UnixMillis,
    /// Taken here in this window (`concurrent`: slots held now).
    used: u64,
    /// Claimed from the fleet for this window (`concurrent`: slots reserved).
    granted: u64,
    /// The fleet counter after this proxy's last claim (`concurrent`: every proxy's reservations).
    fleet: u64,
    largest_take: u64,
    /// A `concurrent` limit: slots held and released, a reservation in the fleet.
    concurrent: bool,
    /// A claim should be sent / is on its way.
    due: bool,
    in_flight: bool,
    /// When a request last used this slot (which end users' slots are forgotten first).
    touched: UnixMillis,
}

impl Slot {
    /// The claim that gives `unused` of this slot's allowance back to the fleet (`key` is the
    /// slot's own).
    fn give_back(&self, key: LimitKey, unused: u64) -> Claim {
        Claim {
            key,
            value: self.configured,
            window_start: self.window_start,
            window_end: self.window_end,
            debt: -(unused as i64),
            want: 0,
            held: 0,
            give_back: true,
        }
    }

    fn new(limit: &Limit, (window_start, window_end): (UnixMillis, UnixMillis)) -> Slot {
        Slot {
            value: limit.value,
            configured: limit.value,
            window_start,
            window_end,
            concurrent: limit.key.concurrent(),
            ..Slot::default()
        }
    }

    /// Fleet consumption as far as this proxy knows: the fleet counter, minus this proxy's
    /// unused allowance, plus what it took beyond its claims.
    fn fleet_used(&self, auth: Authority) -> u64 {
        match auth {
            Authority::Exact => self.used,
            Authority::Fleet { .. } => {
                (self.fleet.saturating_sub(self.granted)).saturating_add(self.used)
            }
        }
    }

    fn remaining(&self, auth: Authority) -> u64 {
        match auth {
            Authority::Fleet {
                connected: false,
                live,
            } => self.offline_cap(live).saturating_sub(self.used),
            _ => self.value.saturating_sub(self.fleet_used(auth)),
        }
    }

    /// What this proxy may hold while the shared counter is unreachable: its share of the
    /// limit, or what it had already claimed when that is more.
    fn offline_cap(&self, live: u32) -> u64 {
        (self.value / u64::from(live.max(1))).max(self.granted)
    }

    /// Whether a hard limit has room for `check` more.
    fn room(&self, check: u64, auth: Authority) -> bool {
        let after = self.used.saturating_add(check);
        match auth {
            Authority::Exact => after <= self.value,
            Authority::Fleet {
                connected: false,
                live,
            } => after <= self.offline_cap(live),
            Authority::Fleet {
                connected: true,
                live,
            } => {
                let debt = after.saturating_sub(self.granted);
                let credit = allowance(self.value, live, self.largest_take.max(check));
                debt == 0 || (debt <= credit && self.fleet.saturating_add(debt) <= self.value)
            }
        }
    }

    /// A claim is due or on its way, or concurrency slots are held: the slot must stay.
    fn busy(&self) -> bool {
        self.due || self.in_flight || (self.concurrent && self.used > 0)
    }

    /// Whether the background should claim for this slot now.
    fn wants_claim(&self, live: u32) -> bool {
        if self.concurrent {
            // The reservation follows the slots held (more, or fewer).
            return self.used != self.granted;
        }
        let w = allowance(self.value, live, self.largest_take);
        self.used > self.granted || (self.granted - self.used < w && self.fleet < self.value)
    }
}

/// A claim the background sends to the shared counter of one limit (one atomic script call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub key: LimitKey,
    /// The limit as configured (a rolling window's room is this less its earlier days).
    pub value: u64,
    pub window_start: UnixMillis,
    pub window_end: UnixMillis,
    /// Windowed: consumption beyond earlier claims, charged whatever the room; negative only in
    /// a give-back (unused allowance). Concurrent: unused.
    pub debt: i64,
    /// Windowed: more allowance asked for, granted up to the room. Concurrent: unused.
    pub want: u64,
    /// Concurrent: slots held now (the proxy's reservation, whatever the room).
    pub held: u64,
    /// A give-back (window over, proxy stopping): no slot waits for its answer.
    pub give_back: bool,
}

/// The local limit table shared by the request path and a fleet store's background.
#[derive(Debug, Default)]
pub(crate) struct Limiter {
    slots: Mutex<Tables>,
}

/// Most slots of each-end-user limits one table holds (one per end user, limit and window
/// seen): end user ids are the client's to choose, so their number has a bound. Past it, the
/// slots whose counting is over go first, then those idle the longest (see
/// [`Tables::forget_end_users`]).
pub const MAX_END_USER_SLOTS: usize = 100_000;

#[derive(Debug)]
struct Tables {
    slots: HashMap<LimitKey, Slot>,
    /// Allowance left over when a window ended, to give back.
    give_backs: Vec<Claim>,
    /// Rolling windows: what each earlier day bucket took (fleet-wide as this proxy knew it
    /// when the day ended), by (limit, day start); days older than the window are dropped.
    history: HashMap<(LimitKey, UnixMillis), u64>,
    /// Slots of each-end-user limits in `slots`, and the most there may be.
    end_users: usize,
    end_user_cap: usize,
}

impl Default for Tables {
    fn default() -> Tables {
        Tables {
            slots: HashMap::default(),
            give_backs: Vec::new(),
            history: HashMap::default(),
            end_users: 0,
            end_user_cap: MAX_END_USER_SLOTS,
        }
    }
}

/// A slot of an each-end-user limit: one per end user (its counter id is the scope id; a limit
/// naming one end user, or a tag, has scope id 0).
fn per_end_user(key: &LimitKey) -> bool {
    key.scope == ScopeKind::EndUser && key.scope_id != 0
}

fn amounts(limit: &Limit, tokens: u64) -> (u64, u64) {
    // (checked, taken): spend is charged after the request; it needs one unit of room.
    match limit.key.metric {
        Metric::Requests | Metric::Concurrent => (1, 1),
        Metric::Tokens => (tokens, tokens),
        Metric::Spend => (1, 0),
    }
}

fn header(slot: &Slot, auth: Authority) -> RateHeader {
    RateHeader {
        limit: slot.configured,
        remaining: slot.remaining(auth),
        reset_at: slot.window_end,
    }
}

fn tighter(old: Option<RateHeader>, new: RateHeader) -> Option<RateHeader> {
    match old {
        Some(o) if o.remaining <= new.remaining => Some(o),
        _ => Some(new),
    }
}

impl Tables {
    /// The slot of `limit` for the window holding `now` (created, or rolled over to it: the
    /// allowance left in the old window is given back; a rolling window's ending day is
    /// remembered and its earlier days summed into `before`).
    fn slot(&mut self, limit: &Limit, now: UnixMillis, auth: Authority) -> &mut Slot {
        let bounds = limit.key.bounds(now);
        if per_end_user(&limit.key) && !self.slots.contains_key(&limit.key) {
            if self.end_users >= self.end_user_cap {
                self.forget_end_users(now);
            }
            self.end_users += 1;
        }
        let Tables {
            slots,
            give_backs,
            history,
            ..
        } = self;
        let slot = slots
            .entry(limit.key)
            .or_insert_with(|| Slot::new(limit, bounds));
        if bounds.0 > slot.window_start {
            let unused = slot.granted.saturating_sub(slot.used);
            // (A claim still on its way gives its own grant back when it lands: `apply`.)
            if unused > 0 {
                give_backs.push(slot.give_back(limit.key, unused));
            }
            let largest = slot.largest_take;
            let ended = (slot.window_start, slot.fleet_used(auth));
            *slot = Slot::new(limit, bounds);
            slot.largest_take = largest;
            if limit.key.window.rolling_days().is_some() {
                slot.before = roll_day(history, limit, ended, now);
            }
        }
        slot.configured = limit.value;
        slot.value = limit.value.saturating_sub(slot.before);
        slot.touched = slot.touched.max(now);
        slot
    }
}

impl Tables {
    /// Makes room for a new end user's slot: forgets every each-end-user slot whose counting is
    /// over (its window, a rolling window's every day, has passed), and when that is not enough,
    /// those idle the longest, down to three quarters of the bound. A slot with a claim on its
    /// way or due, or concurrency slots held, is kept. A forgotten slot gives its unused
    /// allowance back; in a fleet its count lives on in the shared counter (the next claim
    /// learns it), alone its end user's count starts over.
    fn forget_end_users(&mut self, now: UnixMillis) {
        let idle = |key: &LimitKey, slot: &Slot| per_end_user(key) && !slot.busy();
        // Over: nothing held (concurrent), or no day of the window left to count.
        let over = |key: &LimitKey, slot: &Slot| {
            if slot.concurrent {
                slot.granted == 0
            } else {
                key.window.first_day(now) > slot.window_start
            }
        };
        let mut gone: HashSet<LimitKey> = self
            .slots
            .iter()
            .filter(|(key, slot)| idle(key, slot) && over(key, slot))
            .map(|(key, _)| *key)
            .collect();
        let target = self.end_user_cap / 4 * 3;
        if self.end_users.saturating_sub(gone.len()) > target {
            let mut rest: Vec<(UnixMillis, LimitKey)> = self
                .slots
                .iter()
                .filter(|(key, slot)| idle(key, slot) && !gone.contains(*key))
                .map(|(key, slot)| (slot.touched, *key))
                .collect();
            let excess = (self.end_users - gone.len() - target).min(rest.len());
            if excess > 0 && excess < rest.len() {
                rest.select_nth_unstable(excess);
            }
            gone.extend(rest.iter().take(excess).map(|(_, key)| *key));
        }
        for key in &gone {
            if let Some(slot) = self.slots.remove(key) {
                let unused = slot.granted.saturating_sub(slot.used);
                if unused > 0 && !slot.concurrent {
                    self.give_backs.push(slot.give_back(*key, unused));
                }
                self.end_users -= 1;
            }
        }
        self.history.retain(|(key, _), _| !gone.contains(key));
    }
}

/// A rolling window's day `ended` (its start, what it took) is over: remembers it, forgets the
/// days that left the window holding `now`, and returns what the window's earlier days took.
fn roll_day(
    history: &mut HashMap<(LimitKey, UnixMillis), u64>,
    limit: &Limit,
    ended: (UnixMillis, u64),
    now: UnixMillis,
) -> u64 {
    let first = limit.key.window.first_day(now);
    if ended.1 > 0 {
        history.insert((limit.key, ended.0), ended.1);
    }
    history.retain(|(key, day), _| *key != limit.key || *day >= first);
    history
        .iter()
        .filter(|((key, _), _)| *key == limit.key)
        .fold(0u64, |sum, (_, used)| sum.saturating_add(*used))
}

impl Tables {
    /// The hard limit of `req` that refuses it (the one whose room comes back last), checking
    /// without taking; a fleet store marks each refusing slot due for a claim. Returns it and
    /// whether a claim became due.
    fn refusal(
        &mut self,
        req: &LimitRequest<'_>,
        now: UnixMillis,
        auth: Authority,
    ) -> (Option<Refusal>, bool) {
        let mut refused: Option<Refusal> = None;
        let mut due = false;
        for (i, limit) in req.limits.iter().enumerate() {
            let (check, _) = amounts(limit, req.tokens);
            let slot = self.slot(limit, now, auth);
            slot.largest_take = slot.largest_take.max(check);
            if limit.mode == LimitMode::Hard && !slot.room(check, auth) {
                let retry_after_ms = if limit.key.concurrent()
                    || (matches!(
                        auth,
                        Authority::Fleet {
                            connected: true,
                            ..
                        }
                    ) && slot.fleet < slot.value
                        && check <= slot.value)
                {
                    RETRY_SOON_MS
                } else {
                    slot.window_end.saturating_sub(now).max(1)
                };
                if refused.is_none_or(|r| retry_after_ms > r.retry_after_ms) {
                    refused = Some(Refusal {
                        index: i,
                        retry_after_ms,
                    });
                }
                if matches!(auth, Authority::Fleet { .. }) {
                    slot.due = true;
                    due = true;
                }
            }
        }
        (refused, due)
    }
}

impl Limiter {
    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks and takes every limit of a request at once. Returns the admission and whether a
    /// claim became due (a fleet store wakes its background).
    pub fn take(
        &self,
        req: &LimitRequest<'_>,
        now: UnixMillis,
        auth: Authority,
    ) -> (Admission, bool) {
        let mut t = self.lock();
        let mut out = Admission::default();
        let live = match auth {
            Authority::Fleet { live, .. } => live,
            Authority::Exact => 1,
        };
        let (refused, mut due) = t.refusal(req, now, auth);
        out.refused = refused;
        for (i, limit) in req.limits.iter().enumerate() {
            let (_, taken) = amounts(limit, req.tokens);
            let slot = t.slot(limit, now, auth);
            if out.refused.is_none() {
                let before = slot.fleet_used(auth);
                slot.used = slot.used.saturating_add(taken);
                let after = slot.fleet_used(auth);
                if limit.mode == LimitMode::Soft && i < MAX_REPORTED_LIMITS {
                    let bit = 1u64 << i;
                    if after > slot.value {
                        out.soft_over |= bit;
                        if before <= slot.value {
                            out.soft_crossed |= bit;
                        }
                    }
                }
                if matches!(auth, Authority::Fleet { .. }) && slot.wants_claim(live) {
                    slot.due = true;
                    due = true;
                }
            }
            match limit.key.metric {
                Metric::Requests => out.requests = tighter(out.requests, header(slot, auth)),
                Metric::Tokens => out.tokens = tighter(out.tokens, header(slot, auth)),
                Metric::Concurrent | Metric::Spend => {}
            }
        }
        (out, due)
    }

    /// Whether every hard limit of a request has room, taking nothing (a fleet store's refused
    /// limits become due for a claim): the refusal [`Limiter::take`] would give, and whether a
    /// claim became due.
    pub fn room(
        &self,
        req: &LimitRequest<'_>,
        now: UnixMillis,
        auth: Authority,
    ) -> (Result<(), Refusal>, bool) {
        let (refused, due) = self.lock().refusal(req, now, auth);
        (refused.map_or(Ok(()), Err), due)
    }

    /// Adds `delta` to the `metric` limits of `limits`: a token estimate corrected with the real
    /// usage (`taken_at` = when the estimate was taken), or spend charged. A correction of a
    /// window that is over charges the current one when positive and is dropped when negative.
    /// Returns whether a claim became due.
    pub fn settle(
        &self,
        limits: &[Limit],
        metric: Metric,
        delta: i64,
        taken_at: UnixMillis,
        now: UnixMillis,
        auth: Authority,
    ) -> bool {
        let mut t = self.lock();
        let mut due = false;
        let live = match auth {
            Authority::Fleet { live, .. } => live,
            Authority::Exact => 1,
        };
        for limit in limits.iter().filter(|l| l.key.metric == metric) {
            let (start, _) = limit.key.bounds(taken_at);
            let slot = t.slot(limit, now, auth);
            if start < slot.window_start && delta < 0 {
                continue;
            }
            slot.used = slot.used.saturating_add_signed(delta);
            // A charge counts as a take: the allowance (and the credit a proxy may run ahead by)
            // fits the largest, so a budget whose requests each cost more than a hundredth of
            // a proxy's share still admits one at a time between claims.
            slot.largest_take = slot.largest_take.max(u64::try_from(delta).unwrap_or(0));
            if matches!(auth, Authority::Fleet { .. }) && slot.wants_claim(live) {
                slot.due = true;
                due = true;
            }
        }
        due
    }

    /// Releases the slot each `concurrent` limit of an admitted request took.
    pub fn release(&self, limits: &[Limit], auth: Authority) -> bool {
        let mut t = self.lock();
        let mut due = false;
        for limit in limits.iter().filter(|l| l.key.concurrent()) {
            if let Some(slot) = t.slots.get_mut(&limit.key) {
                slot.used = slot.used.saturating_sub(1);
                if let Authority::Fleet { live, .. } = auth {
                    if slot.wants_claim(live) {
                        slot.due = true;
                        due = true;
                    }
                }
            }
        }
        due
    }

    pub fn status(&self, limit: &Limit, now: UnixMillis, auth: Authority) -> LimitStatus {
        let mut t = self.lock();
        let slot = t.slot(limit, now, auth);
        LimitStatus {
            used: slot.fleet_used(auth).saturating_add(slot.before),
            remaining: slot.remaining(auth),
            reset_at: (!limit.key.concurrent()).then_some(slot.window_end),
        }
    }

    /// Every claim to send now (each slot's claim is marked on its way), give-backs first.
    pub fn due_claims(&self, live: u32) -> Vec<Claim> {
        let mut t = self.lock();
        let mut claims = std::mem::take(&mut t.give_backs);
        for (key, slot) in &mut t.slots {
            if !slot.due || slot.in_flight {
                continue;
            }
            slot.due = false;
            slot.in_flight = true;
            let w = allowance(slot.value, live, slot.largest_take);
            claims.push(Claim {
                key: *key,
                value: slot.configured,
                window_start: slot.window_start,
                window_end: slot.window_end,
                debt: slot.used.saturating_sub(slot.granted) as i64,
                want: 2 * w,
                held: slot.used,
                give_back: false,
            });
        }
        claims
    }

    /// The answer to a claim: `Some((granted, fleet))`, the allowance granted (concurrent: the
    /// reservation now held) and the fleet counter after it; `None`: it failed (due again).
    pub fn apply(&self, claim: &Claim, answer: Option<(u64, u64)>) {
        if claim.give_back {
            return;
        }
        let mut t = self.lock();
        let Some(slot) = t.slots.get_mut(&claim.key) else {
            return;
        };
        if slot.window_start != claim.window_start {
            // The window ended while the claim was on its way: give its grant back.
            if let Some((grant, _)) = answer.filter(|(g, _)| *g > 0) {
                t.give_backs.push(Claim {
                    debt: -(grant as i64),
                    want: 0,
                    give_back: true,
                    ..claim.clone()
                });
            }
            return;
        }
        slot.in_flight = false;
        match answer {
            Some((grant, fleet)) if claim.key.concurrent() => {
                slot.granted = grant;
                slot.fleet = fleet;
            }
            Some((grant, fleet)) => {
                slot.granted = slot
                    .granted
                    .saturating_add_signed(claim.debt)
                    .saturating_add(grant);
                slot.fleet = fleet;
            }
            None => slot.due = true,
        }
    }

    /// What a rolling window's earlier days took fleet-wide, as the answer to `claim` read the
    /// shared counters: the current day's room is the limit less that.
    pub fn learn_before(&self, claim: &Claim, before: u64) {
        if claim.give_back {
            return;
        }
        let mut t = self.lock();
        if let Some(slot) = t.slots.get_mut(&claim.key) {
            if slot.window_start == claim.window_start {
                slot.before = before;
                slot.value = slot.configured.saturating_sub(before);
            }
        }
    }

    /// The periodic refresh of concurrency limits: one the fleet had filled learns of slots
    /// other proxies released (or died with), and a proxy holding slots renews its reservation
    /// (recreated if Redis lost it). A failed claim is due again by itself.
    pub fn refresh(&self) -> bool {
        let mut t = self.lock();
        let mut due = false;
        for slot in t.slots.values_mut() {
            if slot.concurrent && (slot.fleet >= slot.value || slot.used > 0) {
                slot.due = true;
                due = true;
            }
        }
        due
    }

    /// Stopping: every unused allowance and every concurrency reservation, given back.
    pub fn give_back_all(&self) -> Vec<Claim> {
        let mut t = self.lock();
        let mut claims = std::mem::take(&mut t.give_backs);
        for (key, slot) in &t.slots {
            let unused = slot.granted.saturating_sub(slot.used);
            if key.concurrent() {
                // A reservation is given back by the claim holding none (`held: 0`), not by a debt.
                claims.push(slot.give_back(*key, 0));
            } else if unused > 0 {
                claims.push(slot.give_back(*key, unused));
            }
        }
        claims
    }

    /// No claim waits to be sent or answered (tests).
    pub fn settled(&self) -> bool {
        let t = self.lock();
        t.give_backs.is_empty() && t.slots.values().all(|s| !s.due && !s.in_flight)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// 2023-11-14T22:13:20Z.
    const NOW: UnixMillis = 1_700_000_000_000;
    const DAY_MS: u64 = 86_400_000;
    const ON: Authority = Authority::Fleet {
        connected: true,
        live: 1,
    };

    fn limit(id: i64, metric: Metric, window: Window, value: u64) -> Limit {
        Limit {
            key: LimitKey {
                scope: ScopeKind::Token,
                scope_id: id,
                metric,
                window,
                rule: None,
            },
            value,
            mode: LimitMode::Hard,
        }
    }

    fn take(l: &Limiter, limits: &[Limit], tokens: u64, auth: Authority) -> (Admission, bool) {
        l.take(&LimitRequest { limits, tokens }, NOW, auth)
    }

    /// Answers every due claim as a lone proxy's Redis would (the counter starts at `fleet0`).
    fn answer_all(l: &Limiter, counters: &mut HashMap<(LimitKey, u64), u64>) {
        answer(l, l.due_claims(1), counters);
    }

    fn answer(l: &Limiter, claims: Vec<Claim>, counters: &mut HashMap<(LimitKey, u64), u64>) {
        for c in claims {
            let counter = counters.entry((c.key, c.window_start)).or_insert(0);
            let grant = if c.key.concurrent() {
                *counter = c.held;
                c.held
            } else {
                let after = counter.saturating_add_signed(c.debt);
                let g = c.value.saturating_sub(after).min(c.want);
                *counter = after + g;
                g
            };
            l.apply(&c, Some((grant, *counter)));
        }
    }

    #[test]
    fn an_allowance_is_a_hundredth_of_each_proxys_share_and_fits_one_take() {
        assert_eq!(allowance(1_000, 3, 1), 3);
        assert_eq!(allowance(100_000, 4, 1), 250);
        assert_eq!(allowance(50, 3, 1), 1, "at least 1");
        assert_eq!(allowance(10_000, 3, 37), 37, "at least the largest take");
        assert_eq!(
            allowance(1_000, 0, 0),
            10,
            "no live proxy seen counts as one"
        );
    }

    #[test]
    fn exact_counts_admit_up_to_the_value() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Tokens, Window::Minute, 100)];
        assert!(take(&l, &limits, 100, Authority::Exact).0.admitted());
        let (a, due) = take(&l, &limits, 1, Authority::Exact);
        assert!(!a.admitted());
        assert!(!due, "no claims without a fleet");
        assert!(l.settled());
    }

    #[test]
    fn a_fleet_proxy_runs_ahead_of_its_claims_by_one_allowance_while_the_fleet_has_room() {
        let l = Limiter::default();
        // Allowance 10 (1 % of 1000 for one proxy).
        let limits = [limit(1, Metric::Requests, Window::Minute, 1_000)];
        for i in 1..=10 {
            let (a, due) = take(&l, &limits, 0, ON);
            assert!(a.admitted(), "take {i} on credit");
            assert!(due, "a claim is due: no allowance yet");
        }
        let (a, _) = take(&l, &limits, 0, ON);
        assert_eq!(
            a.refused,
            Some(Refusal {
                index: 0,
                retry_after_ms: RETRY_SOON_MS
            }),
            "an eleventh would be beyond one allowance; more comes with the claim"
        );
        let claims = l.due_claims(1);
        assert_eq!(claims.len(), 1);
        assert_eq!((claims[0].debt, claims[0].want), (10, 20));
        assert!(l.due_claims(1).is_empty(), "one claim at a time per limit");
        assert!(!l.settled());
        l.apply(&claims[0], Some((20, 30)));
        assert!(l.settled());
        // Allowance 20 claimed beyond the 10 taken: 20 more, then 10 on credit.
        for _ in 0..30 {
            assert!(take(&l, &limits, 0, ON).0.admitted());
        }
        assert!(!take(&l, &limits, 0, ON).0.admitted());
        let status = l.status(&limits[0], NOW, ON);
        assert_eq!((status.used, status.remaining), (40, 960));
    }

    #[test]
    fn no_credit_beyond_what_the_fleet_has_left() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Requests, Window::Minute, 100)];
        // Allowance 1: the first take is on credit.
        assert!(take(&l, &limits, 0, ON).0.admitted());
        let c = l.due_claims(1).remove(0);
        // Other proxies took all but 2: this one gets 1 granted of 2 wanted beyond its debt.
        l.apply(&c, Some((1, 100)));
        assert!(take(&l, &limits, 0, ON).0.admitted(), "the granted one");
        let (a, _) = take(&l, &limits, 0, ON);
        assert_eq!(
            a.refused.map(|r| r.retry_after_ms),
            Some(40_000),
            "the fleet is out: room again when the window ends"
        );
        assert_eq!(a.requests.map(|h| h.remaining), Some(0));
    }

    #[test]
    fn credit_needs_room_in_the_fleet_for_the_whole_take() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Tokens, Window::Minute, 1_000)];
        assert!(take(&l, &limits, 400, ON).0.admitted());
        let c = l.due_claims(1).remove(0);
        assert_eq!((c.debt, c.want), (400, 800));
        // Granted 100 (the fleet had 500 left after the debt): the counter is at 1000.
        l.apply(&c, Some((100, 1_000)));
        assert!(take(&l, &limits, 100, ON).0.admitted(), "exactly the grant");
        assert!(!take(&l, &limits, 1, ON).0.admitted());
        // A take as large as the whole limit fits a fresh window on credit; one unit more never.
        let other = [limit(2, Metric::Tokens, Window::Minute, 1_000)];
        assert!(!take(&l, &other, 1_001, ON).0.admitted());
        assert_eq!(
            take(&l, &other, 1_001, ON)
                .0
                .refused
                .map(|r| r.retry_after_ms),
            Some(40_000)
        );
        assert!(take(&l, &other, 1_000, ON).0.admitted());
    }

    #[test]
    fn redis_away_each_proxy_keeps_its_share_or_what_it_claimed() {
        let l = Limiter::default();
        let off = Authority::Fleet {
            connected: false,
            live: 4,
        };
        let limits = [limit(1, Metric::Requests, Window::Minute, 100)];
        let admitted = (0..100)
            .filter(|_| take(&l, &limits, 0, off).0.admitted())
            .count();
        assert_eq!(admitted, 25);
        let (a, _) = take(&l, &limits, 0, off);
        assert_eq!(a.refused.map(|r| r.retry_after_ms), Some(40_000));
        assert_eq!(a.requests.map(|h| h.remaining), Some(0));
        // A proxy that had claimed more than its share keeps what it claimed.
        let claimed = [limit(2, Metric::Requests, Window::Minute, 100)];
        assert!(take(&l, &claimed, 0, ON).0.admitted());
        let c = l
            .due_claims(4)
            .into_iter()
            .find(|c| c.key == claimed[0].key)
            .unwrap();
        l.apply(&c, Some((39, 40)));
        let admitted = (0..100)
            .filter(|_| take(&l, &claimed, 0, off).0.admitted())
            .count();
        assert_eq!(admitted, 39, "40 claimed, 1 taken before");
    }

    #[test]
    fn soft_limits_count_and_report_without_refusing() {
        let l = Limiter::default();
        let mut soft = limit(1, Metric::Requests, Window::Minute, 1);
        soft.mode = LimitMode::Soft;
        let limits = [soft];
        let a = take(&l, &limits, 0, Authority::Exact).0;
        assert_eq!(
            (a.soft_over, a.soft_crossed),
            (0, 0),
            "at the value, not beyond"
        );
        let a = take(&l, &limits, 0, Authority::Exact).0;
        assert!(a.admitted());
        assert_eq!((a.soft_over, a.soft_crossed), (1, 1));
        // A soft limit past the 64th is enforced (counted) but not reported.
        let mut many = vec![limit(9, Metric::Requests, Window::Minute, 1_000); MAX_REPORTED_LIMITS];
        many.push(soft);
        let a = take(&l, &many, 0, Authority::Exact).0;
        assert!(a.admitted());
        assert_eq!((a.soft_over, a.soft_crossed), (0, 0));
        assert_eq!(l.status(&soft, NOW, Authority::Exact).used, 3);
    }

    #[test]
    fn headers_name_the_tightest_limit_and_refusals_the_last_to_have_room() {
        let l = Limiter::default();
        let limits = [
            limit(1, Metric::Requests, Window::Minute, 10),
            limit(2, Metric::Requests, Window::Hour, 3),
            limit(3, Metric::Requests, Window::Minute, 3),
            limit(4, Metric::Tokens, Window::Day, 50),
        ];
        let a = take(&l, &limits, 5, Authority::Exact).0;
        // Two limits tie at 2 remaining: the first listed is named.
        assert_eq!(
            a.requests,
            Some(RateHeader {
                limit: 3,
                remaining: 2,
                reset_at: 1_700_002_800_000
            })
        );
        assert_eq!(
            a.tokens,
            Some(RateHeader {
                limit: 50,
                remaining: 45,
                reset_at: 1_700_006_400_000
            })
        );
        take(&l, &limits, 5, Authority::Exact);
        take(&l, &limits, 5, Authority::Exact);
        let a = take(&l, &limits, 5, Authority::Exact).0;
        assert_eq!(
            a.refused,
            Some(Refusal {
                index: 1,
                retry_after_ms: 2_800_000
            }),
            "the hour's limit frees up after the minute's"
        );
    }

    #[test]
    fn a_window_that_ends_gives_its_unused_allowance_back() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Requests, Window::Minute, 1_000)];
        let mut counters = HashMap::default();
        take(&l, &limits, 0, ON);
        answer_all(&l, &mut counters);
        // 1 taken, 1 + 20 claimed.
        assert_eq!(counters[&(limits[0].key, 1_699_999_980_000)], 21);
        // A claim still on its way when the window ends.
        for _ in 0..20 {
            take(&l, &limits, 0, ON);
        }
        let late = l.due_claims(1);
        assert_eq!(late.len(), 1);
        let next = NOW + 60_000;
        assert!(l
            .take(
                &LimitRequest {
                    limits: &limits,
                    tokens: 0
                },
                next,
                ON
            )
            .0
            .admitted());
        l.apply(&late[0], Some((20, 41)));
        let (backs, claims): (Vec<Claim>, Vec<Claim>) =
            l.due_claims(1).into_iter().partition(|c| c.give_back);
        answer(&l, claims, &mut counters);
        assert_eq!(
            backs.len(),
            1,
            "nothing was unused when the window ended but the late grant"
        );
        assert_eq!(
            (backs[0].window_start, backs[0].debt, backs[0].want),
            (1_699_999_980_000, -20, 0)
        );
        l.apply(&backs[0], Some((0, 21)));
        // Stopping: the new window's unused allowance goes back too.
        let stop = l.give_back_all();
        assert_eq!(stop.len(), 1);
        assert_eq!(
            (stop[0].window_start, stop[0].debt),
            (1_700_000_040_000, -20)
        );
        assert!(stop[0].give_back);
    }

    #[test]
    fn a_window_ending_with_allowance_left_gives_it_back() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Requests, Window::Minute, 1_000)];
        let mut counters = HashMap::default();
        take(&l, &limits, 0, ON);
        answer_all(&l, &mut counters);
        assert!(l.settled());
        l.take(
            &LimitRequest {
                limits: &limits,
                tokens: 0,
            },
            NOW + 60_000,
            ON,
        );
        let backs: Vec<Claim> = l
            .due_claims(1)
            .into_iter()
            .filter(|c| c.give_back)
            .collect();
        assert_eq!(backs.len(), 1);
        assert_eq!(
            (backs[0].debt, backs[0].window_start),
            (-20, 1_699_999_980_000)
        );
    }

    #[test]
    fn a_failed_claim_is_due_again_and_a_late_one_for_a_forgotten_limit_is_ignored() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Requests, Window::Minute, 1_000)];
        take(&l, &limits, 0, ON);
        let c = l.due_claims(1).remove(0);
        l.apply(&c, None);
        assert!(!l.settled());
        let again = l.due_claims(1);
        assert_eq!(again, std::slice::from_ref(&c));
        // A give-back's answer changes nothing.
        let back = Claim {
            give_back: true,
            ..c.clone()
        };
        l.apply(&back, Some((0, 0)));
        assert!(!l.settled(), "the real claim is still on its way");
        l.apply(&again[0], Some((20, 21)));
        // Its unused allowance is room as far as it knows.
        assert_eq!(l.status(&limits[0], NOW, ON).remaining, 999);
        let unknown = Claim {
            key: limit(99, Metric::Requests, Window::Minute, 1).key,
            ..c
        };
        l.apply(&unknown, Some((5, 5)));
        assert!(l.settled());
    }

    #[test]
    fn concurrency_reservations_follow_the_slots_held() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Concurrent, Window::None, 2)];
        let mut counters = HashMap::default();
        assert!(take(&l, &limits, 0, ON).0.admitted());
        let c = l.due_claims(1);
        assert_eq!((c[0].held, c[0].debt), (1, 1));
        l.apply(&c[0], Some((1, 2)));
        // Another proxy holds 1: the fleet is full.
        let (a, due) = take(&l, &limits, 0, ON);
        assert_eq!(a.refused.map(|r| r.retry_after_ms), Some(RETRY_SOON_MS));
        assert!(due, "a refusal asks the fleet again");
        answer_all(&l, &mut counters);
        assert!(!l.release(&[limit(5, Metric::Concurrent, Window::None, 1)], ON));
        assert!(
            l.release(&limits, ON),
            "held 0, reserved 1: the reservation shrinks"
        );
        let c = l.due_claims(1);
        assert_eq!(c[0].held, 0);
        l.apply(&c[0], Some((0, 1)));
        assert!(!l.refresh(), "nothing held, the fleet not full");
        assert!(take(&l, &limits, 0, ON).0.admitted());
        answer_all(&l, &mut counters);
        assert!(l.refresh(), "a proxy holding slots renews its reservation");
        let stop = l.give_back_all();
        assert_eq!((stop[0].held, stop[0].give_back), (0, true));
        // Released in exact mode too, and never below zero.
        let exact = Limiter::default();
        assert!(take(&exact, &limits, 0, Authority::Exact).0.admitted());
        assert!(take(&exact, &limits, 0, Authority::Exact).0.admitted());
        assert!(!exact.release(&limits, Authority::Exact));
        exact.release(&limits, Authority::Exact);
        exact.release(&limits, Authority::Exact);
        assert_eq!(exact.status(&limits[0], NOW, Authority::Exact).used, 0);
    }

    #[test]
    fn a_full_concurrency_limit_is_asked_again_at_each_refresh() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Concurrent, Window::None, 1)];
        take(&l, &limits, 0, ON);
        let c = l.due_claims(1).remove(0);
        l.apply(&c, Some((1, 1)));
        assert!(l.release(&limits, ON));
        let c = l.due_claims(1).remove(0);
        // Released, but the fleet is full (someone else took the slot).
        l.apply(&c, Some((0, 1)));
        assert!(l.refresh());
    }

    #[test]
    fn settling_charges_debt_to_the_fleet_and_refunds_locally() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Tokens, Window::Minute, 10_000)];
        let mut counters = HashMap::default();
        take(&l, &limits, 100, ON);
        answer_all(&l, &mut counters);
        assert!(
            l.settle(&limits, Metric::Tokens, 500, NOW, NOW, ON),
            "beyond the allowance: the debt is charged"
        );
        let c = l.due_claims(1).remove(0);
        assert_eq!(c.debt, 300, "600 used, 300 claimed");
        l.apply(&c, Some((0, 10_000)));
        assert!(
            !l.settle(&limits, Metric::Tokens, -200, NOW, NOW, ON),
            "a refund needs no claim"
        );
        // The fleet counter says 10 000 claimed, 600 of it here, of which 400 used.
        assert_eq!(l.status(&limits[0], NOW, ON).used, 9_800);
        // A refund for a window that is over is dropped; a charge goes to the current window.
        let later = NOW + 60_000;
        assert!(!l.settle(&limits, Metric::Tokens, -50, NOW, later, ON));
        assert!(l.settle(&limits, Metric::Tokens, 50, NOW, later, ON));
        assert_eq!(l.status(&limits[0], later, ON).used, 50);
        // Exact mode: no claims.
        let exact = Limiter::default();
        assert!(!exact.settle(&limits, Metric::Tokens, 50, NOW, NOW, Authority::Exact));
    }

    #[test]
    fn a_charge_larger_than_the_allowance_widens_it_to_fit_one_such_request() {
        // Spend: a hundredth of 2 000 among 3 proxies is 6, but each request costs 19.
        let l = Limiter::default();
        let budget = [limit(1, Metric::Spend, Window::Day, 2_000)];
        let live3 = Authority::Fleet {
            connected: true,
            live: 3,
        };
        let mut counters = HashMap::default();
        assert!(take(&l, &budget, 0, live3).0.admitted());
        l.settle(&budget, Metric::Spend, 19, NOW, NOW, live3);
        let claims = l.due_claims(3);
        assert_eq!(
            (claims[0].debt, claims[0].want),
            (19, 38),
            "two allowances of one request's cost each"
        );
        answer(&l, claims, &mut counters);
        // 38 granted ahead, then one allowance (19) of credit: three more requests are admitted
        // without waiting for a claim.
        for _ in 0..3 {
            assert!(take(&l, &budget, 0, live3).0.admitted());
            l.settle(&budget, Metric::Spend, 19, NOW, NOW, live3);
        }
        assert!(
            !take(&l, &budget, 0, live3).0.admitted(),
            "beyond one allowance of credit: wait for the claim"
        );
        // A refund never widens it: the allowance stays a hundredth of the share (6).
        let other = [limit(2, Metric::Spend, Window::Day, 2_000)];
        l.settle(&other, Metric::Spend, -500, NOW, NOW, live3);
        let claim = l.due_claims(3).into_iter().find(|c| c.key == other[0].key);
        assert_eq!(claim.map(|c| c.want), Some(12));
    }

    #[test]
    fn a_claim_is_due_below_one_allowance_of_headroom_and_not_once_the_fleet_is_out() {
        let l = Limiter::default();
        // Allowance 10.
        let limits = [limit(1, Metric::Requests, Window::Minute, 1_000)];
        let probe = |l: &Limiter| l.settle(&limits, Metric::Requests, 0, NOW, NOW, ON);
        take(&l, &limits, 0, ON);
        let c = l.due_claims(1).remove(0);
        l.apply(&c, Some((20, 21)));
        // 21 granted, 1 used: due once fewer than 10 are left.
        for _ in 0..10 {
            take(&l, &limits, 0, ON);
        }
        assert!(!probe(&l), "10 left: one allowance");
        take(&l, &limits, 0, ON);
        assert!(probe(&l), "9 left");
        let c = l.due_claims(1).remove(0);
        // The fleet is out: 12 used here, 21 granted, counter at the value.
        l.apply(&c, Some((0, 1_000)));
        assert!(!probe(&l), "nothing more to claim");
        for _ in 0..9 {
            take(&l, &limits, 0, ON);
        }
        assert!(!probe(&l), "all used, no debt: still nothing to claim");
        // Beyond it (a correction): the debt is charged.
        assert!(l.settle(&limits, Metric::Requests, 1, NOW, NOW, ON));
        // A correction dated in an earlier window still reports a due claim of the current one.
        assert!(l.settle(&limits, Metric::Requests, 0, NOW - 60_000, NOW, ON));
    }

    #[test]
    fn a_take_that_fits_the_limit_but_not_the_credit_is_retried_soon() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Tokens, Window::Minute, 1_000)];
        assert!(take(&l, &limits, 1, ON).0.admitted());
        assert_eq!(
            take(&l, &limits, 1_000, ON)
                .0
                .refused
                .map(|r| r.retry_after_ms),
            Some(RETRY_SOON_MS),
            "the whole limit, with one unit already taken: more room may come with a claim"
        );
    }

    #[test]
    fn of_limits_refusing_for_as_long_the_first_is_named() {
        let l = Limiter::default();
        let limits = [
            limit(1, Metric::Requests, Window::Minute, 1),
            limit(2, Metric::Requests, Window::Minute, 1),
        ];
        take(&l, &limits, 0, Authority::Exact);
        assert_eq!(
            take(&l, &limits, 0, Authority::Exact)
                .0
                .refused
                .map(|r| r.index),
            Some(0)
        );
    }

    #[test]
    fn a_late_claim_granted_nothing_gives_nothing_back_nor_does_a_used_up_window() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Requests, Window::Minute, 1_000)];
        take(&l, &limits, 0, ON);
        let c = l.due_claims(1).remove(0);
        l.take(
            &LimitRequest {
                limits: &limits,
                tokens: 0,
            },
            NOW + 60_000,
            ON,
        );
        l.apply(&c, Some((0, 1_000)));
        assert!(l.due_claims(1).iter().all(|c| !c.give_back));
        // All of its allowance used: nothing to give back when stopping.
        let used_up = Limiter::default();
        take(&used_up, &limits, 0, ON);
        let c = used_up.due_claims(1).remove(0);
        used_up.apply(&c, Some((0, 1_000)));
        assert!(used_up.give_back_all().is_empty());
    }

    #[test]
    fn concurrency_has_no_window_and_a_windowless_count_never_rolls() {
        let l = Limiter::default();
        // A concurrency limit that names a window still counts what is in progress.
        let conc = [limit(1, Metric::Concurrent, Window::Minute, 1)];
        assert!(take(&l, &conc, 0, Authority::Exact).0.admitted());
        let next_minute = LimitRequest {
            limits: &conc,
            tokens: 0,
        };
        assert!(!l
            .take(&next_minute, NOW + 60_000, Authority::Exact)
            .0
            .admitted());
        assert_eq!(l.status(&conc[0], NOW, Authority::Exact).reset_at, None);
        // A requests limit without a window counts for ever.
        let lifetime = [limit(2, Metric::Requests, Window::None, 1)];
        assert!(take(&l, &lifetime, 0, Authority::Exact).0.admitted());
        let next_year = LimitRequest {
            limits: &lifetime,
            tokens: 0,
        };
        assert!(!l
            .take(&next_year, NOW + 365 * DAY_MS, Authority::Exact)
            .0
            .admitted());
        assert!(
            !l.release(&lifetime, Authority::Exact),
            "only concurrency is released"
        );
        assert_eq!(l.status(&lifetime[0], NOW, Authority::Exact).used, 1);
    }

    fn at(l: &Limiter, limits: &[Limit], now: UnixMillis, auth: Authority) -> Admission {
        l.take(&LimitRequest { limits, tokens: 0 }, now, auth).0
    }

    #[test]
    fn a_rolling_window_remembers_its_days_until_they_leave_it() {
        let l = Limiter::default();
        let x = Authority::Exact;
        let limits = [limit(1, Metric::Requests, Window::Rolling(3), 3)];
        assert!(at(&l, &limits, NOW, x).admitted());
        assert!(at(&l, &limits, NOW, x).admitted());
        let day1 = NOW + DAY_MS;
        let a = at(&l, &limits, day1, x);
        assert!(a.admitted(), "the third of three");
        let header = a.requests.unwrap();
        assert_eq!(
            (header.limit, header.remaining),
            (3, 0),
            "the configured limit, the window's room"
        );
        let refused = at(&l, &limits, day1, x).refused.unwrap();
        assert_eq!(
            refused.retry_after_ms,
            1_700_092_800_000 - day1,
            "room again when a day leaves"
        );
        // Day 2: days 0 and 1 are still in the window.
        let day2 = day1 + DAY_MS;
        assert!(!at(&l, &limits, day2, x).admitted());
        assert_eq!(l.status(&limits[0], day2, x).used, 3);
        // Day 3: day 0 (2) left; day 1 (1) stays.
        let day3 = day2 + DAY_MS;
        let status = l.status(&limits[0], day3, x);
        assert_eq!((status.used, status.remaining), (1, 2));
        assert!(at(&l, &limits, day3, x).admitted());
        assert!(at(&l, &limits, day3, x).admitted());
        assert!(!at(&l, &limits, day3, x).admitted());
        // Day 4: day 1 left, day 3 (2) stays; a day without a take is remembered as nothing.
        let day4 = day3 + DAY_MS;
        assert_eq!(l.status(&limits[0], day4, x).used, 2);
        // Three days later nothing is left of it, and the history is forgotten.
        let day7 = day4 + 3 * DAY_MS;
        assert_eq!(l.status(&limits[0], day7, x).used, 0);
        assert!(l.lock().history.is_empty(), "{:?}", l.lock().history);
    }

    #[test]
    fn days_are_remembered_per_limit_and_a_calendar_window_keeps_none() {
        let l = Limiter::default();
        let x = Authority::Exact;
        let a = [limit(1, Metric::Requests, Window::Rolling(2), 10)];
        let b = [limit(2, Metric::Requests, Window::Rolling(2), 10)];
        let day = [limit(3, Metric::Requests, Window::Day, 10)];
        for limits in [&a[..], &a[..], &b[..], &day[..]] {
            assert!(at(&l, limits, NOW, x).admitted());
        }
        let next = NOW + DAY_MS;
        assert_eq!(l.status(&a[0], next, x).used, 2);
        assert_eq!(l.status(&b[0], next, x).used, 1);
        assert_eq!(l.status(&day[0], next, x).used, 0);
        assert_eq!(l.lock().history.len(), 2, "the day window keeps no history");
    }

    #[test]
    fn a_day_that_took_nothing_is_not_remembered() {
        let l = Limiter::default();
        let x = Authority::Exact;
        let limits = [limit(1, Metric::Requests, Window::Rolling(3), 10)];
        let key = limits[0].key;
        // The history holds the days that took something: an end user idle for days costs no
        // entry per day. Day 0 takes one; day 1 is looked at but takes nothing; day 2 sees both
        // end.
        assert!(at(&l, &limits, NOW, x).admitted());
        let day1 = NOW + DAY_MS;
        assert_eq!(l.status(&limits[0], day1, x).used, 1);
        let day2 = day1 + DAY_MS;
        assert_eq!(l.status(&limits[0], day2, x).used, 1);
        // Only day 0 is in the history (by its start, 2023-11-14T00:00Z), with what it took.
        let day0_start = 1_699_920_000_000;
        let history: Vec<_> = l.lock().history.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(history, vec![((key, day0_start), 1)]);
    }

    #[test]
    fn a_fleet_proxy_learns_the_earlier_days_from_its_claims() {
        let l = Limiter::default();
        let limits = [limit(1, Metric::Requests, Window::Rolling(7), 1_000)];
        assert!(take(&l, &limits, 0, ON).0.admitted());
        let c = l.due_claims(1).remove(0);
        assert_eq!(c.value, 1_000, "the claim carries the configured limit");
        // Other proxies took 995 on the earlier days: 5 left in all, this proxy took 1.
        l.learn_before(&c, 995);
        l.apply(&c, Some((4, 5)));
        let status = l.status(&limits[0], NOW, ON);
        assert_eq!((status.used, status.remaining), (996, 4));
        for _ in 0..4 {
            assert!(take(&l, &limits, 0, ON).0.admitted());
        }
        let a = take(&l, &limits, 0, ON).0;
        assert!(!a.admitted());
        assert_eq!(a.requests.map(|h| (h.limit, h.remaining)), Some((1_000, 0)));
        // A claim's later answer moves it again; a give-back or another day's claim does not.
        take(&l, &limits, 0, ON);
        let c = l.due_claims(1).remove(0);
        l.learn_before(&c, 990);
        assert_eq!(l.status(&limits[0], NOW, ON).used, 995);
        l.learn_before(
            &Claim {
                give_back: true,
                ..c.clone()
            },
            0,
        );
        l.learn_before(
            &Claim {
                window_start: c.window_start - DAY_MS,
                ..c.clone()
            },
            0,
        );
        l.learn_before(
            &Claim {
                key: limit(9, Metric::Requests, Window::Rolling(7), 1).key,
                ..c.clone()
            },
            0,
        );
        assert_eq!(l.status(&limits[0], NOW, ON).used, 995);
        // Beyond the limit: no room at all, never an underflow.
        l.learn_before(&c, 5_000);
        assert_eq!(l.status(&limits[0], NOW, ON).remaining, 0);
    }

    /// User `user`'s slot of one each-end-user limit (rule 5).
    fn per_user(user: i64, metric: Metric, window: Window, value: u64) -> Limit {
        Limit {
            key: LimitKey {
                scope: ScopeKind::EndUser,
                scope_id: user,
                metric,
                window,
                rule: Some(5),
            },
            value,
            mode: LimitMode::Hard,
        }
    }

    fn users(l: &Limiter) -> (usize, usize) {
        let t = l.lock();
        (
            t.end_users,
            t.slots.keys().filter(|k| per_end_user(k)).count(),
        )
    }

    #[test]
    fn each_end_users_slots_stay_within_the_bound_however_many_end_users_come() {
        let l = Limiter::default();
        l.lock().end_user_cap = 8;
        let x = Authority::Exact;
        for user in 1..=1_000 {
            let one = [per_user(user, Metric::Requests, Window::Minute, 1)];
            assert!(at(&l, &one, NOW + user as u64, x).admitted(), "user {user}");
            let (counted, held) = users(&l);
            assert_eq!(counted, held, "the count follows the table");
            assert!(held <= 8, "{held} slots after user {user}");
        }
        // A tag or a named end user's slot (scope id 0) is not an end user's of its own.
        let named = [per_user(0, Metric::Requests, Window::Minute, 1)];
        assert!(at(&l, &named, NOW, x).admitted());
        assert!(users(&l).0 <= 8);
        assert!(!per_end_user(&named[0].key));
        assert!(!per_end_user(
            &limit(3, Metric::Requests, Window::Minute, 1).key
        ));
    }

    #[test]
    fn the_idlest_end_users_are_forgotten_first_and_a_counting_one_is_kept() {
        let l = Limiter::default();
        l.lock().end_user_cap = 4;
        let x = Authority::Exact;
        let one = |user| [per_user(user, Metric::Requests, Window::Minute, 1)];
        // Users 1..=4 in turn, then user 1 again (refused: it used its one request).
        for user in 1..=4 {
            assert!(at(&l, &one(user), NOW + user as u64, x).admitted());
        }
        assert!(
            !at(&l, &one(1), NOW + 10, x).admitted(),
            "user 1 is counted"
        );
        // User 5 makes room: down to three, the idlest (2) goes, 1 (touched last) stays.
        assert!(at(&l, &one(5), NOW + 11, x).admitted());
        let t = l.lock();
        assert_eq!(t.end_users, 4, "three kept and the new one");
        assert!(t.slots.contains_key(&one(1)[0].key), "used last: kept");
        assert!(
            !t.slots.contains_key(&one(2)[0].key),
            "idle the longest: forgotten"
        );
        drop(t);
        assert!(!at(&l, &one(1), NOW + 12, x).admitted(), "still counted");
    }

    #[test]
    fn end_users_whose_windows_are_over_go_before_any_idle_one() {
        let l = Limiter::default();
        l.lock().end_user_cap = 4;
        let x = Authority::Exact;
        let week = |user| [per_user(user, Metric::Requests, Window::Rolling(7), 1)];
        let minute = |user| [per_user(user, Metric::Requests, Window::Minute, 1)];
        for user in [2, 3] {
            assert!(at(&l, &minute(user), NOW, x).admitted());
        }
        assert!(at(&l, &week(1), NOW + 1, x).admitted());
        let later = NOW + 2 * DAY_MS;
        assert!(at(&l, &minute(4), later, x).admitted());
        // Two days on: users 2 and 3's minutes are over and go; user 1, idle longer than 4,
        // stays: its week still counts its day.
        assert!(at(&l, &minute(5), later + 10, x).admitted());
        {
            let t = l.lock();
            assert_eq!(t.end_users, 3);
            assert!(t.slots.contains_key(&week(1)[0].key));
            assert!(!t.slots.contains_key(&minute(2)[0].key));
        }
        assert!(
            !at(&l, &week(1), later + 11, x).admitted(),
            "its day still counts"
        );
        assert!(!l.lock().history.is_empty());
        // A week on, user 1's window is over too: it goes, with the days it remembered.
        let next_week = NOW + 9 * DAY_MS;
        for user in 6..=7 {
            assert!(at(&l, &minute(user), next_week + user as u64, x).admitted());
        }
        let t = l.lock();
        assert!(
            !t.slots.contains_key(&week(1)[0].key),
            "counted out: forgotten"
        );
        assert!(t.slots.contains_key(&minute(6)[0].key));
        assert_eq!(t.end_users, 2);
        assert!(t.history.is_empty());
    }

    #[test]
    fn a_standalone_end_user_holding_a_concurrency_slot_is_kept_however_idle() {
        let l = Limiter::default();
        l.lock().end_user_cap = 4;
        let x = Authority::Exact;
        let holding = [per_user(1, Metric::Concurrent, Window::None, 2)];
        assert!(at(&l, &holding, NOW, x).admitted(), "a slot held");
        let minute = |user| [per_user(user, Metric::Requests, Window::Minute, 5)];
        for user in 2..=4 {
            assert!(at(&l, &minute(user), NOW + user as u64, x).admitted());
        }
        // A fifth end user makes room (down to three): user 1 was touched first, but its slot
        // is held, so the idlest of the others, user 2, goes.
        assert!(at(&l, &minute(5), NOW + 5, x).admitted());
        {
            let t = l.lock();
            assert!(t.slots.contains_key(&holding[0].key), "a slot held: kept");
            assert!(!t.slots.contains_key(&minute(2)[0].key), "idle: forgotten");
            assert!(
                t.give_backs.is_empty(),
                "nothing was granted: nothing to give back"
            );
        }
        // Its slot given back, user 1 holds nothing: it goes first, and is enough.
        l.release(&holding, x);
        assert!(at(&l, &minute(6), NOW + 6, x).admitted());
        let t = l.lock();
        assert!(
            !t.slots.contains_key(&holding[0].key),
            "released: forgotten"
        );
        for kept in 3..=6 {
            assert!(t.slots.contains_key(&minute(kept)[0].key), "user {kept}");
        }
    }

    #[test]
    fn every_standalone_end_user_holding_nothing_goes_when_room_is_made() {
        let l = Limiter::default();
        l.lock().end_user_cap = 4;
        let x = Authority::Exact;
        let holding = |user| [per_user(user, Metric::Concurrent, Window::None, 2)];
        let minute = |user| [per_user(user, Metric::Requests, Window::Minute, 5)];
        for user in 1..=2 {
            assert!(at(&l, &holding(user), NOW + user as u64, x).admitted());
            l.release(&holding(user), x);
        }
        for user in 3..=4 {
            assert!(at(&l, &minute(user), NOW + user as u64, x).admitted());
        }
        // Room for a fifth: both end users whose slots were given back have nothing to count,
        // so both go, more than the one the bound needs; the counting ones stay.
        assert!(at(&l, &minute(5), NOW + 5, x).admitted());
        let t = l.lock();
        for gone in 1..=2 {
            assert!(!t.slots.contains_key(&holding(gone)[0].key), "user {gone}");
        }
        for kept in 3..=5 {
            assert!(t.slots.contains_key(&minute(kept)[0].key), "user {kept}");
        }
        assert_eq!(t.end_users, 3);
    }

    #[test]
    fn room_is_made_down_to_three_quarters_of_the_bound_counting_those_already_gone() {
        let l = Limiter::default();
        l.lock().end_user_cap = 8;
        let x = Authority::Exact;
        let holding = [per_user(1, Metric::Concurrent, Window::None, 2)];
        assert!(at(&l, &holding, NOW, x).admitted());
        l.release(&holding, x);
        let minute = |user| [per_user(user, Metric::Requests, Window::Minute, 5)];
        for user in 2..=8 {
            assert!(at(&l, &minute(user), NOW + user as u64, x).admitted());
        }
        // A ninth: user 1 (holding nothing) goes, and one more, the idlest (2), to reach six;
        // then the ninth is counted.
        assert!(at(&l, &minute(9), NOW + 9, x).admitted());
        let t = l.lock();
        assert_eq!(t.end_users, 7);
        assert!(!t.slots.contains_key(&holding[0].key));
        assert!(!t.slots.contains_key(&minute(2)[0].key));
        for kept in 3..=9 {
            assert!(t.slots.contains_key(&minute(kept)[0].key), "user {kept}");
        }
    }

    #[test]
    fn a_fleet_end_user_with_a_claim_on_its_way_or_slots_held_is_kept_and_gives_back() {
        let l = Limiter::default();
        l.lock().end_user_cap = 4;
        let conc = [per_user(1, Metric::Concurrent, Window::None, 2)];
        assert!(take(&l, &conc, 0, ON).0.admitted(), "a slot held");
        let claiming = [per_user(2, Metric::Requests, Window::Minute, 1_000)];
        assert!(take(&l, &claiming, 0, ON).0.admitted());
        let claims = l.due_claims(1);
        assert_eq!(claims.len(), 2, "both on their way");
        let granted = [per_user(3, Metric::Requests, Window::Minute, 1_000)];
        assert!(take(&l, &granted, 0, ON).0.admitted());
        let c = l.due_claims(1).remove(0);
        l.apply(&c, Some((20, 21)));
        assert!(take(
            &l,
            &[per_user(4, Metric::Requests, Window::Minute, 1_000)],
            0,
            ON
        )
        .0
        .admitted());
        let _ = l.due_claims(1);
        // A fifth: only user 3 (answered, idle) may go; 1 holds a slot, 2 and 4 await answers.
        assert!(take(
            &l,
            &[per_user(5, Metric::Requests, Window::Minute, 1_000)],
            0,
            ON
        )
        .0
        .admitted());
        let t = l.lock();
        assert!(!t.slots.contains_key(&granted[0].key));
        for kept in [&conc[0].key, &claiming[0].key] {
            assert!(t.slots.contains_key(kept));
        }
        let back: Vec<_> = t.give_backs.iter().map(|c| (c.key, c.debt)).collect();
        assert_eq!(
            back,
            [(granted[0].key, -20)],
            "its unused allowance goes back"
        );
    }
}
