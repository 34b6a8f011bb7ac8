//! Limits at the proxy: which limits a request is under, admitting it (or refusing it with a
//! 429 the client's SDK understands), and charging what it really used when it ends.
//!
//! Every check is one call into the state store's local limiter (never a round trip): the
//! token's, its team's and the route's limits when the request arrives, a member's channel and
//! member limits when it is picked. A request with no limit anywhere allocates nothing here.

use std::sync::Arc;

use http::{HeaderMap, HeaderValue};
use switchyard_engine::subject::Attribution;
use switchyard_engine::{Limit, Metric, ScopeKind, Snapshot, Token, UnixMillis};
use switchyard_provider::Usage;
use switchyard_state::{unix_ms, Admission, LimitMode, LimitRequest, RateHeader, StateStore};

use crate::errors::GatewayError;

/// The token estimate a request is admitted with: a quarter of its body's bytes (about one
/// token per four bytes of JSON) plus the output it may ask for (`max_tokens` and its kin).
pub fn estimate(body_len: usize, max_output: Option<u64>) -> u64 {
    (body_len as u64 / 4).saturating_add(max_output.unwrap_or(0))
}

/// The limits a client request for `model` (the name the client asked for; `None` when the
/// request names none) is under: its token's, its team's and its route's (soft and hard
/// together), the plain ones and those narrowed to its model or its route, and those of its
/// tags and its end user (`who`). Empty, and allocation-free (a `concat` of empty slices
/// allocates nothing), when none of them has any.
pub fn client_limits(
    snapshot: &Snapshot,
    token: &Token,
    route: Option<i64>,
    model: Option<&str>,
    who: Attribution<'_>,
) -> Vec<Limit> {
    let parts = [
        snapshot.limits_of(ScopeKind::Token, token.id),
        token
            .team_id
            .map_or(&[][..], |team| snapshot.limits_of(ScopeKind::Team, team)),
        route.map_or(&[][..], |route| snapshot.limits_of(ScopeKind::Route, route)),
    ];
    let mut limits = parts.concat();
    let scopes = [
        Some((ScopeKind::Token, token.id)),
        token.team_id.map(|team| (ScopeKind::Team, team)),
        route.map(|route| (ScopeKind::Route, route)),
    ];
    for (scope, id) in scopes.into_iter().flatten() {
        limits.extend(snapshot.narrowed_limits_of(scope, id, model, route));
    }
    let subjects = snapshot.subject_limits();
    if !subjects.is_empty() {
        limits.extend(subjects.of(who, model, route));
    }
    limits
}

/// The upstream limits of a member: its channel's and its own.
pub fn upstream_limits(snapshot: &Snapshot, channel: i64, member: i64) -> Vec<Limit> {
    [
        snapshot.limits_of(ScopeKind::Channel, channel),
        snapshot.limits_of(ScopeKind::Member, member),
    ]
    .concat()
}

/// Longest a request waits for this proxy's allowance to be topped up from the fleet.
pub const TOP_UP_WAIT: std::time::Duration = std::time::Duration::from_millis(50);
/// How often a request waiting for a top-up looks again.
pub const TOP_UP_POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// Whether a refusal by `limit` (its room back in `retry_after_ms`) is only this proxy's
/// allowance running out while the fleet, as last seen, has room: more is being claimed, and
/// the limit is not full (a concurrency slot's room comes back in its own time).
pub fn topping_up(limit: &Limit, retry_after_ms: u64) -> bool {
    retry_after_ms <= switchyard_state::RETRY_SOON_MS && !limit.key.concurrent()
}

/// Limits a request was admitted under: charged with what it really used, and its concurrency
/// slots released, when it ends ([`Held::finish`]); dropped unfinished (a failed attempt, a
/// request abandoned), the slots are released and the token estimate given back.
pub struct Held {
    store: Arc<dyn StateStore>,
    limits: Vec<Limit>,
    estimate: u64,
    taken_at: UnixMillis,
    done: bool,
}

impl Held {
    /// Takes `limits` for one request. The admission says what the headers need; refused, the
    /// limits come back unheld with the one that refused.
    pub fn take(
        store: &Arc<dyn StateStore>,
        limits: Vec<Limit>,
        estimate: u64,
        now: UnixMillis,
    ) -> (Admission, Result<Held, Refused>) {
        let admission = store.limit_take(
            &LimitRequest {
                limits: &limits,
                tokens: estimate,
            },
            now,
        );
        // The store names a limit of the request when it refuses (so the list is not empty).
        let refused = admission.refused.and_then(|r| {
            let limit = *limits.get(r.index).or(limits.first())?;
            Some((limit, r.retry_after_ms))
        });
        let outcome = match refused {
            Some((limit, retry_after_ms)) => Err(Refused {
                limits,
                limit,
                retry_after_ms,
            }),
            None => Ok(Held {
                store: Arc::clone(store),
                limits,
                estimate,
                taken_at: now,
                done: false,
            }),
        };
        (admission, outcome)
    }

    /// [`Held::take`], waiting a little when the refusal is only this proxy's allowance running
    /// out while the fleet, as last seen, still has room: the background's claim for more is
    /// already on its way, and a request should not be refused for the few milliseconds it
    /// takes (at most [`TOP_UP_WAIT`]; no round trip is made for the request itself).
    pub async fn admit(
        store: &Arc<dyn StateStore>,
        mut limits: Vec<Limit>,
        estimate: u64,
    ) -> (Admission, Result<Held, Refused>) {
        let deadline = tokio::time::Instant::now() + TOP_UP_WAIT;
        loop {
            let (admission, outcome) = Held::take(store, limits, estimate, unix_ms());
            let refused = match outcome {
                Err(refused) if refused.topping_up() && tokio::time::Instant::now() < deadline => {
                    refused
                }
                outcome => return (admission, outcome),
            };
            limits = refused.limits;
            tokio::time::sleep(TOP_UP_POLL).await;
        }
    }

    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// The request ended: its tokens limits learn the real usage (no usage reported: a
    /// successful request keeps its estimate, a failed one gives it back), its spend limits are
    /// charged its cost (rounded up to the micro-USD), its concurrency slots are released.
    pub fn finish(mut self, usage: Option<Usage>, cost_pico: Option<u128>, succeeded: bool) {
        self.settle(usage, cost_pico, succeeded);
    }

    fn settle(&mut self, usage: Option<Usage>, cost_pico: Option<u128>, succeeded: bool) {
        if self.done {
            return;
        }
        self.done = true;
        let now = unix_ms();
        let has = |metric: Metric| self.limits.iter().any(|l| l.key.metric == metric);
        if has(Metric::Tokens) {
            let used = match usage {
                Some(u) => u.input_tokens.saturating_add(u.output_tokens),
                None if succeeded => self.estimate,
                None => 0,
            };
            let delta = clamp_i64(i128::from(used) - i128::from(self.estimate));
            if delta != 0 {
                self.store
                    .limit_settle(&self.limits, Metric::Tokens, delta, self.taken_at, now);
            }
        }
        if let Some(cost) = cost_pico.filter(|c| *c > 0 && has(Metric::Spend)) {
            let micros = cost.div_ceil(1_000_000);
            self.store.limit_settle(
                &self.limits,
                Metric::Spend,
                clamp_i64(micros as i128),
                now,
                now,
            );
        }
        if has(Metric::Concurrent) {
            self.store.limit_release(&self.limits);
        }
    }
}

fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl Drop for Held {
    fn drop(&mut self) {
        // Not finished: nothing was served under these limits.
        self.settle(None, None, false);
    }
}

/// A request a hard limit refused: nothing was taken.
pub struct Refused {
    /// The request's limits, given back.
    pub limits: Vec<Limit>,
    /// The limit that refused (when several, the one whose room comes back last).
    pub limit: Limit,
    pub retry_after_ms: u64,
}

impl Refused {
    /// Only this proxy's allowance is used up, the fleet had room as last seen: more is being
    /// claimed (a concurrency slot's room comes back in its own time).
    pub fn topping_up(&self) -> bool {
        topping_up(&self.limit, self.retry_after_ms)
    }

    /// The client's answer. A spend limit is *spent* when its room comes back only with the next
    /// window; sooner, the budget still has room fleet-wide and this proxy waits for its share
    /// to be topped up (a plain rate limit).
    pub fn error(&self) -> GatewayError {
        let key = self.limit.key;
        GatewayError::RateLimited {
            scope: key.scope,
            metric: key.metric,
            window: key.window,
            value: self.limit.value,
            retry_after_ms: self.retry_after_ms,
            spent: key.metric == Metric::Spend
                && self.retry_after_ms > switchyard_state::RETRY_SOON_MS,
        }
    }
}

/// The soft limits among `limits` this admission crossed (for an event and a metric).
pub fn soft_crossed<'l>(
    limits: &'l [Limit],
    admission: &Admission,
) -> impl Iterator<Item = &'l Limit> + 'l {
    let crossed = admission.soft_crossed;
    limits
        .iter()
        .enumerate()
        .filter(move |(i, l)| l.mode == LimitMode::Soft && *i < 64 && crossed & (1u64 << i) != 0)
        .map(|(_, l)| l)
}

/// The OpenAI rate-limit headers of an answer to a request under requests or tokens limits.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateHeaders {
    pub requests: Option<RateHeader>,
    pub tokens: Option<RateHeader>,
}

impl RateHeaders {
    pub fn of(admission: &Admission) -> RateHeaders {
        RateHeaders {
            requests: admission.requests,
            tokens: admission.tokens,
        }
    }

    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, as OpenAI sends them (the reset
    /// as a duration: `1s`, `6m0s`, `120ms`).
    pub fn write(&self, headers: &mut HeaderMap, now: UnixMillis) {
        use http::HeaderName;
        const NAMES: [[HeaderName; 3]; 2] = [
            [
                HeaderName::from_static("x-ratelimit-limit-requests"),
                HeaderName::from_static("x-ratelimit-remaining-requests"),
                HeaderName::from_static("x-ratelimit-reset-requests"),
            ],
            [
                HeaderName::from_static("x-ratelimit-limit-tokens"),
                HeaderName::from_static("x-ratelimit-remaining-tokens"),
                HeaderName::from_static("x-ratelimit-reset-tokens"),
            ],
        ];
        let count = usize::from(self.requests.is_some()) + usize::from(self.tokens.is_some());
        // One growth of the map at most, not one per header.
        headers.reserve(3 * count);
        for (names, header) in NAMES.iter().zip([self.requests, self.tokens]) {
            let Some(h) = header else { continue };
            let [limit, remaining, reset] = names;
            headers.insert(limit.clone(), HeaderValue::from(h.limit));
            headers.insert(remaining.clone(), HeaderValue::from(h.remaining));
            let mut text = DurationText::default();
            if let Ok(value) = HeaderValue::from_bytes(text.write(h.reset_at.saturating_sub(now))) {
                headers.insert(reset.clone(), value);
            }
        }
    }
}

/// A duration as OpenAI writes its resets: `850ms`, `12s`, `6m0s`, `1h2m3s` (seconds rounded
/// up), written into a buffer on the stack: it goes on every answer to a limited request.
struct DurationText {
    buf: [u8; 48],
    len: usize,
}

impl Default for DurationText {
    fn default() -> DurationText {
        DurationText {
            buf: [0; 48],
            len: 0,
        }
    }
}

impl DurationText {
    fn write(&mut self, ms: u64) -> &[u8] {
        self.len = 0;
        if ms < 1_000 {
            self.number(ms);
            self.push(b"ms");
        } else {
            let s = ms.div_ceil(1_000);
            let (h, m, s) = (s / 3_600, s / 60 % 60, s % 60);
            if h > 0 {
                self.number(h);
                self.push(b"h");
            }
            if h > 0 || m > 0 {
                self.number(m);
                self.push(b"m");
            }
            self.number(s);
            self.push(b"s");
        }
        &self.buf[..self.len]
    }

    fn number(&mut self, n: u64) {
        self.push(itoa::Buffer::new().format(n).as_bytes());
    }

    fn push(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// [`DurationText`] as a string (for tests).
#[cfg(test)]
fn duration_text(ms: u64) -> String {
    String::from_utf8_lossy(DurationText::default().write(ms)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::subject::end_user_counter;
    use switchyard_engine::{LimitKey, Window};
    use switchyard_state::InMemoryStore;

    fn limit(metric: Metric, mode: LimitMode) -> Limit {
        Limit {
            key: LimitKey {
                scope: ScopeKind::Token,
                scope_id: 1,
                metric,
                // No window: the count never rolls over under a test.
                window: Window::None,
                rule: None,
            },
            value: 1_000_000,
            mode,
        }
    }

    fn reported(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            cached_tokens: 0,
        }
    }

    /// The three limits a request is charged under when it ends, taken with an estimate of 100
    /// tokens: what each has used.
    struct Charged {
        store: Arc<dyn StateStore>,
        tokens: Limit,
        spend: Limit,
        slot: Limit,
    }

    impl Charged {
        fn take() -> (Charged, Held) {
            let store: Arc<dyn StateStore> = Arc::new(InMemoryStore::new());
            let tokens = limit(Metric::Tokens, LimitMode::Hard);
            let spend = limit(Metric::Spend, LimitMode::Hard);
            let slot = limit(Metric::Concurrent, LimitMode::Hard);
            let (admission, held) =
                Held::take(&store, vec![tokens, spend, slot], 100, crate::unix_ms());
            assert!(admission.admitted());
            let Ok(held) = held else {
                panic!("room everywhere, and the request was refused")
            };
            let charged = Charged {
                store,
                tokens,
                spend,
                slot,
            };
            assert_eq!(charged.used(), (100, 0, 1), "taken at admission");
            (charged, held)
        }

        /// Tokens, micro-USD and concurrency slots used.
        fn used(&self) -> (u64, u64, u64) {
            let now = crate::unix_ms();
            let used = |limit: &Limit| self.store.limit_status(limit, now).used;
            (used(&self.tokens), used(&self.spend), used(&self.slot))
        }
    }

    #[test]
    fn a_finished_request_is_charged_its_usage_and_cost_and_frees_its_slot() {
        let (charged, held) = Charged::take();
        assert_eq!(held.limits().len(), 3);
        let usage = reported(30, 40);
        // 2 µUSD and one pico-USD: rounded up to 3 µUSD.
        held.finish(Some(usage), Some(2_000_001), true);
        assert_eq!(charged.used(), (70, 3, 0));

        let (charged, held) = Charged::take();
        let usage = reported(150, 1);
        held.finish(Some(usage), Some(1), true);
        assert_eq!(
            charged.used(),
            (151, 1, 0),
            "more than the estimate, the least cost"
        );
    }

    #[test]
    fn without_usage_a_success_keeps_its_estimate_and_a_failure_gives_it_back() {
        let (charged, held) = Charged::take();
        held.finish(None, None, true);
        assert_eq!(charged.used(), (100, 0, 0));

        let (charged, held) = Charged::take();
        held.finish(None, Some(0), false);
        assert_eq!(charged.used(), (0, 0, 0));

        // Dropped unfinished (an abandoned request): the same as a failure.
        let (charged, held) = Charged::take();
        drop(held);
        assert_eq!(charged.used(), (0, 0, 0));
    }

    #[test]
    fn an_exact_estimate_and_no_cost_charge_nothing_more() {
        let (charged, held) = Charged::take();
        let usage = reported(60, 40);
        held.finish(Some(usage), Some(0), true);
        assert_eq!(charged.used(), (100, 0, 0));
    }

    #[test]
    fn a_request_under_one_kind_of_limit_alone_is_settled_on_it() {
        // Each kind of limit on its own: the settlement finds it among the request's limits.
        let take = |limit: Limit| {
            let store: Arc<dyn StateStore> = Arc::new(InMemoryStore::new());
            let (_, held) = Held::take(&store, vec![limit], 100, crate::unix_ms());
            let Ok(held) = held else {
                panic!("room everywhere, and the request was refused")
            };
            (store, held)
        };
        let used = |store: &Arc<dyn StateStore>, limit: &Limit| {
            store.limit_status(limit, crate::unix_ms()).used
        };

        let tokens = limit(Metric::Tokens, LimitMode::Hard);
        let (store, held) = take(tokens);
        held.finish(Some(reported(30, 40)), None, true);
        assert_eq!(
            used(&store, &tokens),
            70,
            "charged its usage, not the estimate"
        );

        let spend = limit(Metric::Spend, LimitMode::Hard);
        let (store, held) = take(spend);
        held.finish(None, Some(3_000_000), true);
        assert_eq!(used(&store, &spend), 3, "charged its cost");

        let slot = limit(Metric::Concurrent, LimitMode::Hard);
        let (store, held) = take(slot);
        assert_eq!(used(&store, &slot), 1);
        held.finish(None, None, true);
        assert_eq!(used(&store, &slot), 0, "its slot released");
    }

    /// A store whose limiter refuses the first `refusals` takes with `retry_after_ms` (a
    /// top-up on its way when at most a second), then admits; it records when each take came.
    /// Everything else is the in-memory store's.
    struct Refusing {
        inner: InMemoryStore,
        refusals: usize,
        retry_after_ms: u64,
        takes: std::sync::Mutex<Vec<tokio::time::Instant>>,
    }

    impl Refusing {
        fn store(refusals: usize, retry_after_ms: u64) -> Arc<Refusing> {
            Arc::new(Refusing {
                inner: InMemoryStore::new(),
                refusals,
                retry_after_ms,
                takes: std::sync::Mutex::new(Vec::new()),
            })
        }

        fn takes(&self) -> Vec<tokio::time::Instant> {
            self.takes.lock().map(|t| t.clone()).unwrap_or_default()
        }
    }

    impl StateStore for Refusing {
        fn limit_take(&self, request: &LimitRequest<'_>, now: UnixMillis) -> Admission {
            let Ok(mut takes) = self.takes.lock() else {
                panic!("a test's lock poisoned")
            };
            takes.push(tokio::time::Instant::now());
            if takes.len() <= self.refusals {
                return Admission {
                    refused: Some(switchyard_state::Refusal {
                        index: 0,
                        retry_after_ms: self.retry_after_ms,
                    }),
                    ..Admission::default()
                };
            }
            self.inner.limit_take(request, now)
        }
        fn with_view(&self, f: &mut dyn FnMut(&dyn switchyard_engine::HealthView)) {
            self.inner.with_view(f)
        }
        fn index_put(
            &self,
            index: &str,
            entry: switchyard_state::IndexEntry,
            now: UnixMillis,
        ) -> switchyard_state::RecordFuture<()> {
            self.inner.index_put(index, entry, now)
        }
        fn index_list(
            &self,
            index: &str,
            now: UnixMillis,
        ) -> switchyard_state::RecordFuture<Vec<switchyard_state::IndexEntry>> {
            self.inner.index_list(index, now)
        }
        fn index_remove(&self, index: &str, member: &str) -> switchyard_state::RecordFuture<()> {
            self.inner.index_remove(index, member)
        }
        fn claim_once(
            &self,
            key: &str,
            expires_at: UnixMillis,
            now: UnixMillis,
        ) -> switchyard_state::RecordFuture<bool> {
            self.inner.claim_once(key, expires_at, now)
        }
        fn record_success(
            &self,
            s: &switchyard_state::AttemptSuccess<'_>,
            now: UnixMillis,
        ) -> switchyard_state::SuccessEffect {
            self.inner.record_success(s, now)
        }
        fn record_failure(
            &self,
            f: &switchyard_state::AttemptFailure<'_>,
            p: &switchyard_state::FailurePolicy,
            now: UnixMillis,
        ) -> switchyard_state::FailureEffect {
            self.inner.record_failure(f, p, now)
        }
        fn record_channel_failure(
            &self,
            c: switchyard_engine::ChannelId,
            p: &switchyard_state::FailurePolicy,
            now: UnixMillis,
        ) -> switchyard_state::ChannelFailureEffect {
            self.inner.record_channel_failure(c, p, now)
        }
        fn trip_breaker(&self, c: switchyard_engine::ChannelId, reason: &str, now: UnixMillis) {
            self.inner.trip_breaker(c, reason, now)
        }
        fn reset_channel(
            &self,
            c: switchyard_engine::ChannelId,
            m: &[switchyard_engine::MemberId],
        ) {
            self.inner.reset_channel(c, m)
        }
        fn begin_recovery(
            &self,
            c: switchyard_engine::ChannelId,
            m: &[switchyard_engine::MemberId],
            now: UnixMillis,
            slow_start_ms: u64,
        ) {
            self.inner.begin_recovery(c, m, now, slow_start_ms)
        }
        fn extend_cooldown(&self, m: switchyard_engine::MemberId, until: UnixMillis) {
            self.inner.extend_cooldown(m, until)
        }
        fn disable_credential(
            &self,
            c: switchyard_engine::CredentialId,
            reason: &str,
            now: UnixMillis,
        ) {
            self.inner.disable_credential(c, reason, now)
        }
        fn enable_credential(&self, c: switchyard_engine::CredentialId, now: UnixMillis) {
            self.inner.enable_credential(c, now)
        }
        fn in_flight_acquire(&self, c: switchyard_engine::ChannelId) {
            self.inner.in_flight_acquire(c)
        }
        fn in_flight_release(&self, c: switchyard_engine::ChannelId) {
            self.inner.in_flight_release(c)
        }
        fn bind_sticky(
            &self,
            r: switchyard_engine::RouteId,
            key: &str,
            m: switchyard_engine::MemberId,
            ttl_ms: u64,
            now: UnixMillis,
        ) {
            self.inner.bind_sticky(r, key, m, ttl_ms, now)
        }
        fn dump(&self, now: UnixMillis) -> switchyard_state::StateDump {
            self.inner.dump(now)
        }
        fn align_health(&self, slots: &Arc<switchyard_engine::HealthSlots>) {
            self.inner.align_health(slots)
        }
        fn limit_room(
            &self,
            request: &LimitRequest<'_>,
            now: UnixMillis,
        ) -> Result<(), switchyard_state::Refusal> {
            self.inner.limit_room(request, now)
        }
        fn limit_settle(
            &self,
            limits: &[Limit],
            metric: Metric,
            delta: i64,
            taken_at: UnixMillis,
            now: UnixMillis,
        ) {
            self.inner
                .limit_settle(limits, metric, delta, taken_at, now)
        }
        fn limit_release(&self, limits: &[Limit]) {
            self.inner.limit_release(limits)
        }
        fn limit_status(&self, l: &Limit, now: UnixMillis) -> switchyard_state::LimitStatus {
            self.inner.limit_status(l, now)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_for_a_top_up_and_is_admitted_once_it_lands() {
        let refusing = Refusing::store(3, switchyard_state::RETRY_SOON_MS);
        let store: Arc<dyn StateStore> = refusing.clone();
        let limits = vec![limit(Metric::Requests, LimitMode::Hard)];
        let (admission, outcome) = Held::admit(&store, limits, 0).await;
        assert!(admission.admitted());
        assert!(outcome.is_ok());
        let takes = refusing.takes();
        assert_eq!(takes.len(), 4, "three refusals, then the take that admits");
        for pair in takes.windows(2) {
            assert!(pair[1] - pair[0] >= TOP_UP_POLL, "{takes:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_top_up_is_waited_for_until_the_deadline_and_no_longer() {
        let refusing = Refusing::store(usize::MAX, switchyard_state::RETRY_SOON_MS);
        let store: Arc<dyn StateStore> = refusing.clone();
        let limits = vec![limit(Metric::Requests, LimitMode::Hard)];
        let start = tokio::time::Instant::now();
        let (admission, outcome) = Held::admit(&store, limits, 0).await;
        assert!(!admission.admitted());
        let Err(refused) = outcome else {
            panic!("an allowance never topped up admitted a request")
        };
        assert_eq!(refused.retry_after_ms, switchyard_state::RETRY_SOON_MS);
        let takes = refusing.takes();
        // The last look is the first at or past the deadline: refused, it waits no more.
        let last = takes[takes.len() - 1] - start;
        assert!(
            last >= TOP_UP_WAIT && last < TOP_UP_WAIT + TOP_UP_POLL,
            "the last look {last:?} after the start, the wait {TOP_UP_WAIT:?}"
        );
        assert_eq!(start.elapsed(), last, "no wait after the last look");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_limit_or_a_full_slot_is_refused_at_once() {
        for (metric, retry_after_ms) in [
            (Metric::Requests, switchyard_state::RETRY_SOON_MS + 1),
            (Metric::Concurrent, switchyard_state::RETRY_SOON_MS),
        ] {
            let refusing = Refusing::store(usize::MAX, retry_after_ms);
            let store: Arc<dyn StateStore> = refusing.clone();
            let (_, outcome) = Held::admit(&store, vec![limit(metric, LimitMode::Hard)], 0).await;
            assert!(outcome.is_err(), "{metric:?}");
            assert_eq!(refusing.takes().len(), 1, "{metric:?}: looked again");
        }
    }

    #[test]
    fn the_soft_limits_crossed_are_the_soft_ones_at_the_admissions_bits() {
        let hard = limit(Metric::Requests, LimitMode::Hard);
        let soft = limit(Metric::Requests, LimitMode::Soft);
        // A bit beyond the 64 the admission has room for names no limit.
        let mut limits = vec![soft; 66];
        limits[0] = hard;
        limits[2] = hard;
        for (i, limit) in limits.iter_mut().enumerate() {
            limit.value = i as u64;
        }
        let crossed = |bits: u64| {
            let admission = Admission {
                soft_crossed: bits,
                ..Admission::default()
            };
            soft_crossed(&limits, &admission)
                .map(|l| l.value)
                .collect::<Vec<_>>()
        };
        assert_eq!(crossed(0), Vec::<u64>::new());
        assert_eq!(crossed(0b1_1111), vec![1, 3, 4]);
        assert_eq!(crossed(0b1010), vec![1, 3]);
        assert_eq!(crossed(1 << 63), vec![63]);
        assert_eq!(crossed(u64::MAX).len(), 62);
    }

    #[test]
    fn rate_headers_say_each_metrics_limit_remaining_and_reset() {
        let header = |limit, remaining, reset_at| RateHeader {
            limit,
            remaining,
            reset_at,
        };
        let admission = Admission {
            requests: Some(header(60, 59, 1_000_000 + 6_000)),
            tokens: Some(header(10_000, 9_000, 1_000_000 + 360_000)),
            ..Admission::default()
        };
        let rate = RateHeaders::of(&admission);
        let mut headers = HeaderMap::new();
        rate.write(&mut headers, 1_000_000);
        let text = |name: &str| headers[name].to_str().unwrap_or_default().to_owned();
        assert_eq!(headers.len(), 6);
        assert_eq!(text("x-ratelimit-limit-requests"), "60");
        assert_eq!(text("x-ratelimit-remaining-requests"), "59");
        assert_eq!(text("x-ratelimit-reset-requests"), "6s");
        assert_eq!(text("x-ratelimit-limit-tokens"), "10000");
        assert_eq!(text("x-ratelimit-remaining-tokens"), "9000");
        assert_eq!(text("x-ratelimit-reset-tokens"), "6m0s");

        // Tokens alone; a reset already past reads 0ms.
        let tokens_only = RateHeaders {
            requests: None,
            tokens: Some(header(5, 0, 10)),
        };
        let mut headers = HeaderMap::new();
        tokens_only.write(&mut headers, 20);
        assert_eq!(headers.len(), 3);
        assert_eq!(headers["x-ratelimit-reset-tokens"], "0ms");
        assert!(!headers.contains_key("x-ratelimit-limit-requests"));
    }

    #[test]
    fn an_answer_to_a_request_under_no_requests_or_tokens_limit_gets_no_rate_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", HeaderValue::from_static("r1"));
        RateHeaders::of(&Admission::default()).write(&mut headers, 1_000_000);
        RateHeaders::default().write(&mut headers, 1_000_000);
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert_eq!(headers["x-request-id"], "r1");
    }

    #[test]
    fn a_request_is_under_its_tokens_teams_and_routes_limits_and_a_member_under_its_own_and_its_channels(
    ) {
        let yaml = "channels:\n  - { id: 1, name: a, provider: mock }\n  - { id: 2, name: b, provider: mock }\nroutes:\n  - id: 1\n    model_pattern: m\n    members:\n      - { id: 1, channel: a }\n      - { id: 2, channel: b }\nteams:\n  - { id: 1, name: research, models: ['*'] }\ntokens:\n  - { id: 1, name: app, token: sk-app, team: research }\n  - { id: 2, name: solo, token: sk-solo }\nlimits:\n  - { token: app, metric: requests, window: minute, value: 10 }\n  - { team: research, metric: requests, window: hour, value: 20 }\n  - { route: m, metric: requests, window: day, value: 30 }\n  - { channel: a, metric: requests, window: minute, value: 40 }\n  - { member: 1, metric: requests, window: minute, value: 50 }\n  - { member: 2, metric: requests, window: minute, value: 60 }\n  - { token: app, metric: requests, window: minute, value: 70, model_pattern: 'gpt-4*' }\n  - { team: research, metric: tokens, window: 7d, value: 80, on_route: m }\n";
        let snapshot = Snapshot::new(crate::config::parse_yaml(yaml, 1).unwrap());
        let token = |id: i64| snapshot.tokens().iter().find(|t| t.id == id).unwrap();
        let values = |limits: Vec<Limit>| limits.iter().map(|l| l.value).collect::<Vec<_>>();
        assert_eq!(
            values(client_limits(
                &snapshot,
                token(1),
                Some(1),
                Some("m"),
                nobody()
            )),
            [10, 20, 30, 80],
            "the team's limit on route m applies there"
        );
        // The key's limit on gpt-4* models applies to a request for one, through any route.
        assert_eq!(
            values(client_limits(
                &snapshot,
                token(1),
                None,
                Some("gpt-4o"),
                nobody()
            )),
            [10, 20, 70]
        );
        assert_eq!(
            values(client_limits(&snapshot, token(1), Some(1), None, nobody())),
            [10, 20, 30, 80],
            "no model named: model-narrowed limits do not apply"
        );
        assert_eq!(
            values(client_limits(
                &snapshot,
                token(1),
                None,
                Some("m"),
                nobody()
            )),
            [10, 20]
        );
        assert_eq!(
            values(client_limits(
                &snapshot,
                token(2),
                Some(1),
                Some("m"),
                nobody()
            )),
            [30]
        );
        assert_eq!(
            values(client_limits(
                &snapshot,
                token(2),
                None,
                Some("m"),
                nobody()
            )),
            Vec::<u64>::new()
        );
        assert_eq!(values(upstream_limits(&snapshot, 1, 1)), [40, 50]);
        assert_eq!(values(upstream_limits(&snapshot, 2, 2)), [60]);
        assert_eq!(values(upstream_limits(&snapshot, 2, 3)), Vec::<u64>::new());
    }

    fn nobody() -> Attribution<'static> {
        Attribution::default()
    }

    #[test]
    fn a_request_is_under_its_tags_its_end_users_and_its_own_each_end_user_limits() {
        let yaml = "channels:\n  - { id: 1, name: a, provider: mock }\nroutes:\n  - id: 1\n    model_pattern: m\n    members:\n      - { id: 1, channel: a }\ntokens:\n  - { id: 1, name: app, token: sk-app }\nlimits:\n  - { id: 1, token: app, metric: requests, window: minute, value: 10 }\n  - { id: 2, tag: acme, metric: requests, window: minute, value: 20 }\n  - { id: 3, end_user: alice, metric: requests, window: minute, value: 30 }\n  - { id: 4, each_end_user: true, metric: requests, window: minute, value: 40 }\n  - { id: 5, tag: beta, metric: spend, window: 7d, value: 5, on_route: m }\n";
        let snapshot = Snapshot::new(crate::config::parse_yaml(yaml, 1).unwrap());
        let token = &snapshot.tokens()[0];
        let tags = ["acme".to_owned(), "beta".to_owned()];
        let keys = |who: Attribution<'_>, route| {
            client_limits(&snapshot, token, route, Some("m"), who)
                .iter()
                .map(|l| (l.value, l.key.scope_id))
                .collect::<Vec<_>>()
        };
        let alice = snapshot.subject_limits().attribution(&tags, Some("alice"));
        let id = end_user_counter("alice");
        assert_eq!(alice.end_user, Some(("alice", id)));
        assert_eq!(
            keys(alice, Some(1)),
            [(10, 1), (20, 0), (5_000_000, 0), (30, 0), (40, id)]
        );
        assert_eq!(
            keys(alice, None),
            [(10, 1), (20, 0), (30, 0), (40, id)],
            "the beta limit counts route m only"
        );
        let bob = snapshot.subject_limits().attribution(&[], Some("bob"));
        assert_eq!(keys(bob, None), [(10, 1), (40, end_user_counter("bob"))]);
        assert_eq!(
            keys(nobody(), Some(1)),
            [(10, 1)],
            "no tag, no end user: only the key's own"
        );
    }

    #[test]
    fn resets_read_as_openai_writes_them() {
        assert_eq!(duration_text(0), "0ms");
        assert_eq!(duration_text(850), "850ms");
        assert_eq!(duration_text(1_000), "1s");
        assert_eq!(duration_text(11_200), "12s");
        assert_eq!(duration_text(360_000), "6m0s");
        assert_eq!(duration_text(3_723_000), "1h2m3s");
        assert_eq!(duration_text(7_200_000), "2h0m0s");
        assert_eq!(duration_text(999), "999ms");
        assert_eq!(duration_text(1_001), "2s");
        assert_eq!(duration_text(60_000), "1m0s");
        assert_eq!(duration_text(3_599_000), "59m59s");
        assert_eq!(duration_text(3_600_000), "1h0m0s");
        assert_eq!(duration_text(3_601_000), "1h0m1s");
        assert_eq!(duration_text(u64::MAX), "5124095576030h25m52s");
    }

    #[test]
    fn estimates_are_a_quarter_of_the_body_plus_the_output_asked_for() {
        assert_eq!(estimate(400, None), 100);
        assert_eq!(estimate(401, Some(50)), 150);
        assert_eq!(estimate(0, Some(u64::MAX)), u64::MAX);
    }
}
