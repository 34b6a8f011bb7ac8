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
//! See ARCHITECTURE.md (shared/state) for the overshoot bound and its argument.

use std::sync::{Mutex, MutexGuard};

use serde::Serialize;
use switchyard_engine::fxhash::FxHashMap as HashMap;
use switchyard_engine::UnixMillis;

/// Most limits whose soft crossing an [`Admission`] reports (bit `i` = `limits[i]`); further
/// limits of the same request are still enforced.
pub const MAX_REPORTED_LIMITS: usize = 64;

/// `Retry-After` of a refusal that more room can end at any time (a concurrency slot, an
/// allowance refill): one second.
pub const RETRY_SOON_MS: u64 = 1_000;

/// Whom a limit applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    Token,
    Team,
    Route,
    Channel,
    Member,
}

/// What a limit counts. Spend is in micro-USD (an exact integer, never a float).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Requests,
    /// Input + output tokens: taken with an estimate, corrected with the real usage.
    Tokens,
    /// Requests in progress: a slot taken at admission, released when the request ends.
    Concurrent,
    /// Micro-USD, charged after the request.
    Spend,
}

/// The counting window: UTC calendar windows (minute, hour, day, month); `None` for
/// `concurrent`, which counts what is in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    None,
    Minute,
    Hour,
    Day,
    Month,
}

/// Hard limits refuse requests beyond them; soft ones let them pass and report the crossing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitMode {
    Hard,
    Soft,
}

/// The identity of a limit's counter (shared by every proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct LimitKey {
    pub scope: ScopeKind,
    pub scope_id: i64,
    pub metric: Metric,
    pub window: Window,
}

/// One limit as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limit {
    pub key: LimitKey,
    pub value: u64,
    pub mode: LimitMode,
}

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

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 86_400_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1..=12).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month 1..=12) of a day count since 1970-01-01.
fn year_month(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m)
}

impl Window {
    /// `[start, end)` of the window holding `now` (UTC); `(0, u64::MAX)` for `None`.
    pub fn bounds(self, now: UnixMillis) -> (UnixMillis, UnixMillis) {
        let fixed = |len: u64| {
            let start = now - now % len;
            (start, start + len)
        };
        match self {
            Window::None => (0, u64::MAX),
            Window::Minute => fixed(MINUTE_MS),
            Window::Hour => fixed(HOUR_MS),
            Window::Day => fixed(DAY_MS),
            Window::Month => {
                let (y, m) = year_month((now / DAY_MS) as i64);
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                let day = |y, m| days_from_civil(y, m, 1) as u64 * DAY_MS;
                (day(y, m), day(ny, nm))
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Window::None => "none",
            Window::Minute => "minute",
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Month => "month",
        }
    }
}

impl LimitKey {
    /// The key's name in the shared store: `scope:id:metric:window`.
    pub fn name(&self) -> String {
        let scope = match self.scope {
            ScopeKind::Token => "token",
            ScopeKind::Team => "team",
            ScopeKind::Route => "route",
            ScopeKind::Channel => "channel",
            ScopeKind::Member => "member",
        };
        let metric = match self.metric {
            Metric::Requests => "requests",
            Metric::Tokens => "tokens",
            Metric::Concurrent => "concurrent",
            Metric::Spend => "spend",
        };
        format!(
            "{scope}:{}:{metric}:{}",
            self.scope_id,
            self.window.as_str()
        )
    }

    fn concurrent(&self) -> bool {
        self.metric == Metric::Concurrent
    }
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

/// One limit key's local state.
#[derive(Debug, Clone, Default)]
struct Slot {
    value: u64,
    window_start: UnixMillis,
    window_end: UnixMillis,
    /// Taken here in this window (`concurrent`: slots held now).
    used: u64,
    /// Claimed from the fleet for this window (`concurrent`: slots reserved).
    granted: u64,
    /// The fleet counter after this proxy's last claim (`concurrent`: every proxy's reservations).
    fleet: u64,
    largest_take: u64,
    /// A claim should be sent / is on its way.
    due: bool,
    in_flight: bool,
}

impl Slot {
    fn new(value: u64, (window_start, window_end): (UnixMillis, UnixMillis)) -> Slot {
        Slot {
            value,
            window_start,
            window_end,
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

    /// Whether the background should claim for this slot now.
    fn wants_claim(&self, live: u32) -> bool {
        if self.key_concurrent() {
            // The reservation follows the slots held (more, or fewer).
            return self.used != self.granted;
        }
        let w = allowance(self.value, live, self.largest_take);
        self.used > self.granted || (self.granted - self.used < w && self.fleet < self.value)
    }

    fn key_concurrent(&self) -> bool {
        self.window_end == u64::MAX
    }
}

/// A claim the background sends to the shared counter of one limit (one atomic script call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub key: LimitKey,
    pub value: u64,
    pub window_start: UnixMillis,
    pub window_end: UnixMillis,
    /// Windowed: consumption beyond earlier claims, charged whatever the room (negative:
    /// unused allowance given back). Concurrent: unused.
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

#[derive(Debug, Default)]
struct Tables {
    slots: HashMap<LimitKey, Slot>,
    /// Allowance left over when a window ended, to give back.
    give_backs: Vec<Claim>,
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
        limit: slot.value,
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
    /// allowance left in the old window is given back).
    fn slot(&mut self, limit: &Limit, now: UnixMillis) -> &mut Slot {
        let bounds = limit.key.window.bounds(now);
        let give_backs = &mut self.give_backs;
        let slot = self
            .slots
            .entry(limit.key)
            .or_insert_with(|| Slot::new(limit.value, bounds));
        if bounds.0 > slot.window_start {
            let unused = slot.granted.saturating_sub(slot.used);
            if unused > 0 && !slot.in_flight {
                give_backs.push(Claim {
                    key: limit.key,
                    value: slot.value,
                    window_start: slot.window_start,
                    window_end: slot.window_end,
                    debt: -(unused as i64),
                    want: 0,
                    held: 0,
                    give_back: true,
                });
            }
            let largest = slot.largest_take;
            *slot = Slot::new(limit.value, bounds);
            slot.largest_take = largest;
        }
        slot.value = limit.value;
        slot
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
        let mut due = false;
        let live = match auth {
            Authority::Fleet { live, .. } => live,
            Authority::Exact => 1,
        };
        for (i, limit) in req.limits.iter().enumerate() {
            let (check, _) = amounts(limit, req.tokens);
            let slot = t.slot(limit, now);
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
                if out
                    .refused
                    .is_none_or(|r| retry_after_ms > r.retry_after_ms)
                {
                    out.refused = Some(Refusal {
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
        for (i, limit) in req.limits.iter().enumerate() {
            let (_, taken) = amounts(limit, req.tokens);
            let slot = t.slot(limit, now);
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
            let (start, _) = limit.key.window.bounds(taken_at);
            let slot = t.slot(limit, now);
            if start < slot.window_start && delta < 0 {
                continue;
            }
            slot.used = slot.used.saturating_add_signed(delta);
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
        let slot = t.slot(limit, now);
        LimitStatus {
            used: slot.fleet_used(auth),
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
                value: slot.value,
                window_start: slot.window_start,
                window_end: slot.window_end,
                debt: slot.used as i64 - slot.granted as i64,
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

    /// The periodic refresh of concurrency limits: one the fleet had filled learns of slots
    /// other proxies released (or died with), and a proxy holding slots renews its reservation
    /// (recreated if Redis lost it). A failed claim is due again by itself.
    pub fn refresh(&self) -> bool {
        let mut t = self.lock();
        let mut due = false;
        for slot in t.slots.values_mut() {
            if slot.key_concurrent() && (slot.fleet >= slot.value || slot.used > 0) {
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
                claims.push(Claim {
                    key: *key,
                    value: slot.value,
                    window_start: slot.window_start,
                    window_end: slot.window_end,
                    debt: 0,
                    want: 0,
                    held: 0,
                    give_back: true,
                });
            } else if unused > 0 {
                claims.push(Claim {
                    key: *key,
                    value: slot.value,
                    window_start: slot.window_start,
                    window_end: slot.window_end,
                    debt: -(unused as i64),
                    want: 0,
                    held: 0,
                    give_back: true,
                });
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
