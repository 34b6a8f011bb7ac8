//! Who is connected: the cap, per-address counts, and which connection has been idle longest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use switchyard_metrics::{Collect, Writer};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One connection's activity, shared with its service: requests in progress, and since when
/// (ms after the registry's epoch) it has had none.
pub struct Activity {
    busy: AtomicU32,
    idle_since_ms: AtomicU64,
    epoch: Instant,
    /// The request in progress has a body that has not been read to its end.
    unread_body: AtomicBool,
}

impl Activity {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A request started; the connection is busy until the returned guard (carried by the
    /// response body) is dropped.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Relaxed);
        Busy(Arc::clone(self))
    }

    /// The connection was upgraded (a WebSocket): busy until it closes, so it is never evicted
    /// as idle. The count is never given back: the activity ends with its connection.
    pub fn hold_upgraded(&self) {
        self.busy.fetch_add(1, Relaxed);
    }

    /// Marks whether the request in progress has a body not yet read to its end. HTTP/1 runs
    /// one request at a time on a connection, so one flag per connection is enough.
    pub(crate) fn set_unread_body(&self, unread: bool) {
        self.unread_body.store(unread, Relaxed);
    }

    pub(crate) fn unread_body(&self) -> bool {
        self.unread_body.load(Relaxed)
    }

    /// Whether a request is in progress (from its head to the end of its answer).
    pub(crate) fn is_busy(&self) -> bool {
        self.busy.load(Relaxed) > 0
    }

    fn idle_for_eviction(&self) -> Option<u64> {
        (self.busy.load(Relaxed) == 0).then(|| self.idle_since_ms.load(Relaxed))
    }
}

/// A request in progress on a connection.
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.idle_since_ms.store(self.0.now_ms(), Relaxed);
        self.0.busy.fetch_sub(1, Relaxed);
    }
}

struct Entry {
    ip: IpAddr,
    activity: Arc<Activity>,
    evict: CancellationToken,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    conns: HashMap<u64, Entry>,
    per_ip: HashMap<IpAddr, usize>,
}

/// Live counters for `/metrics`.
#[derive(Clone)]
pub struct Stats(Arc<Registry>);

impl Stats {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.0.lock().conns.len()
    }

    /// Appends the counters in the Prometheus text format, named as for an HTTP port.
    pub fn render(&self, out: &mut String) {
        self.render_as(out, &HTTP_METRICS);
    }

    /// Appends the counters in the Prometheus text format under `names` (another port served
    /// through a [`Registry`] names its own).
    pub fn render_as(&self, out: &mut String, names: &MetricNames) {
        self.write_as(&mut Writer::new(out), names);
    }

    /// These counters as the collector of a port named `names` (the HTTP ports' collector is
    /// the [`Stats`] itself).
    pub fn named(self, names: &'static MetricNames) -> NamedStats {
        NamedStats { stats: self, names }
    }

    fn write_as(&self, w: &mut Writer<'_>, names: &MetricNames) {
        let r = &self.0;
        let MetricNames {
            what,
            open,
            max,
            refused,
            evicted,
            accept_errors,
        } = names;
        w.gauge(open, &format!("{what} open now."), self.open())
            .gauge(max, "The connection cap in force.", r.max)
            .counter(
                refused,
                "Connections refused at the cap (every connection busy).",
                r.refused.load(Relaxed),
            )
            .counter(
                evicted,
                "Idle connections closed to admit a new one at the cap.",
                r.evicted.load(Relaxed),
            )
            .counter(
                accept_errors,
                "Failed accepts (e.g. out of descriptors).",
                r.accept_errors.load(Relaxed),
            );
    }
}

/// An HTTP port's connection counters on `/metrics`.
impl Collect for Stats {
    fn collect(&self, w: &mut Writer<'_>) {
        self.write_as(w, &HTTP_METRICS);
    }
}

/// Another port's connection counters on `/metrics`, under its own names ([`Stats::named`]).
#[derive(Clone)]
pub struct NamedStats {
    stats: Stats,
    names: &'static MetricNames,
}

impl Collect for NamedStats {
    fn collect(&self, w: &mut Writer<'_>) {
        self.stats.write_as(w, self.names);
    }
}

/// The metric names [`Stats::render_as`] writes.
#[derive(Debug, Clone, Copy)]
pub struct MetricNames {
    /// Starts the help text of the open-connections gauge ("Client connections").
    pub what: &'static str,
    pub open: &'static str,
    pub max: &'static str,
    pub refused: &'static str,
    pub evicted: &'static str,
    pub accept_errors: &'static str,
}

/// The HTTP ports' names.
pub const HTTP_METRICS: MetricNames = MetricNames {
    what: "Client connections",
    open: "switchyard_http_connections",
    max: "switchyard_http_connections_max",
    refused: "switchyard_http_connections_refused_total",
    evicted: "switchyard_http_connections_evicted_total",
    accept_errors: "switchyard_http_accept_errors_total",
};

pub struct Registry {
    max: usize,
    max_per_ip: usize,
    epoch: Instant,
    inner: Mutex<Inner>,
    refused: AtomicU64,
    evicted: AtomicU64,
    accept_errors: AtomicU64,
}

/// [`Registry::admit`] refused: at the cap, and every connection that could make room is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtCapacity;

/// A connection's place in the registry; leaving it (drop) frees the place.
pub struct Admission {
    registry: Arc<Registry>,
    id: u64,
    activity: Arc<Activity>,
    evict: CancellationToken,
}

impl Admission {
    pub fn activity(&self) -> Arc<Activity> {
        Arc::clone(&self.activity)
    }

    /// Fires when the registry closes this connection to admit another.
    pub fn evicted(&self) -> CancellationToken {
        self.evict.clone()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        if let Some(entry) = inner.conns.remove(&self.id) {
            release_ip(&mut inner, entry.ip);
        }
    }
}

fn release_ip(inner: &mut Inner, ip: IpAddr) {
    if let Some(n) = inner.per_ip.get_mut(&ip) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            inner.per_ip.remove(&ip);
        }
    }
}

impl Registry {
    pub fn new(max: usize, max_per_ip: usize) -> Registry {
        Registry {
            max: max.max(1),
            max_per_ip,
            epoch: Instant::now(),
            inner: Mutex::new(Inner::default()),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn stats(self: &Arc<Self>) -> Stats {
        Stats(Arc::clone(self))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means a panic elsewhere; the map itself is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn note_accept_error(&self) {
        self.accept_errors.fetch_add(1, Relaxed);
    }

    /// Admits a connection from `ip`, evicting the longest-idle one (of that address when the
    /// per-address cap is the one reached) if needed; `Err` when every candidate is busy.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admission, AtCapacity> {
        let mut inner = self.lock();
        if self.max_per_ip > 0
            && inner.per_ip.get(&ip).copied().unwrap_or(0) >= self.max_per_ip
            && !self.evict_locked(&mut inner, Some(ip))
        {
            self.refused.fetch_add(1, Relaxed);
            return Err(AtCapacity);
        }
        if inner.conns.len() >= self.max && !self.evict_locked(&mut inner, None) {
            self.refused.fetch_add(1, Relaxed);
            return Err(AtCapacity);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let activity = Arc::new(Activity {
            busy: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(0),
            epoch: self.epoch,
            unread_body: AtomicBool::new(false),
        });
        activity.idle_since_ms.store(activity.now_ms(), Relaxed);
        let evict = CancellationToken::new();
        inner.conns.insert(
            id,
            Entry {
                ip,
                activity: Arc::clone(&activity),
                evict: evict.clone(),
            },
        );
        *inner.per_ip.entry(ip).or_insert(0) += 1;
        Ok(Admission {
            registry: Arc::clone(self),
            id,
            activity,
            evict,
        })
    }

    /// Evicts the longest-idle connection, if any is idle.
    pub fn evict_one_idle(&self) -> bool {
        let mut inner = self.lock();
        self.evict_locked(&mut inner, None)
    }

    /// O(connections), run only at the cap.
    fn evict_locked(&self, inner: &mut Inner, only_ip: Option<IpAddr>) -> bool {
        let victim = inner
            .conns
            .iter()
            .filter(|(_, e)| only_ip.is_none_or(|ip| e.ip == ip))
            .filter_map(|(id, e)| Some((e.activity.idle_for_eviction()?, *id)))
            .min();
        let Some((_, id)) = victim else {
            return false;
        };
        if let Some(entry) = inner.conns.remove(&id) {
            release_ip(inner, entry.ip);
            entry.evict.cancel();
            self.evicted.fetch_add(1, Relaxed);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn at_the_cap_the_longest_idle_connection_makes_room() {
        let registry = Arc::new(Registry::new(2, 0));
        let a = registry.admit(ip(1)).unwrap();
        let b = registry.admit(ip(2)).unwrap();
        let _busy_b = b.activity().begin();
        let c = registry.admit(ip(3)).unwrap();
        assert!(a.evicted().is_cancelled(), "the idle one goes");
        assert!(!b.evicted().is_cancelled(), "a busy one stays");
        // Now b is busy and c idle: c is evicted for d.
        let _d = registry.admit(ip(4)).unwrap();
        assert!(c.evicted().is_cancelled());
        assert_eq!(registry.stats().open(), 2);
    }

    #[test]
    fn every_connection_busy_refuses_the_newcomer() {
        let registry = Arc::new(Registry::new(1, 0));
        let a = registry.admit(ip(1)).unwrap();
        let _busy = a.activity().begin();
        assert!(registry.admit(ip(2)).is_err());
        assert_eq!(registry.refused.load(Relaxed), 1);
        drop(_busy);
        assert!(registry.admit(ip(2)).is_ok());
    }

    #[test]
    fn the_per_address_cap_evicts_only_that_address() {
        let registry = Arc::new(Registry::new(10, 1));
        let other = registry.admit(ip(9)).unwrap();
        let first = registry.admit(ip(1)).unwrap();
        let _second = registry.admit(ip(1)).unwrap();
        assert!(first.evicted().is_cancelled());
        assert!(!other.evicted().is_cancelled());
    }

    #[test]
    fn of_several_idle_connections_the_one_idle_longest_goes_whatever_its_age() {
        let registry = Arc::new(Registry::new(2, 0));
        let older = registry.admit(ip(1)).unwrap();
        let younger = registry.admit(ip(2)).unwrap();
        // The older connection then serves a request that ends after the younger one went
        // idle: it is now the one idle for the shorter time.
        let busy = older.activity().begin();
        std::thread::sleep(std::time::Duration::from_millis(5));
        drop(busy);
        let _newcomer = registry.admit(ip(3)).unwrap();
        assert!(younger.evicted().is_cancelled(), "idle since admission");
        assert!(
            !older.evicted().is_cancelled(),
            "idle only since its request"
        );
    }

    #[test]
    fn a_connection_is_busy_from_a_requests_start_to_its_answers_end() {
        let registry = Arc::new(Registry::new(4, 0));
        let a = registry.admit(ip(1)).unwrap();
        let activity = a.activity();
        assert!(!activity.is_busy());
        let first = activity.begin();
        let second = activity.begin();
        assert!(activity.is_busy());
        drop(first);
        assert!(activity.is_busy(), "one request still in progress");
        drop(second);
        assert!(!activity.is_busy());
    }

    #[test]
    fn evicting_one_idle_connection_on_demand() {
        let registry = Arc::new(Registry::new(4, 0));
        assert!(!registry.evict_one_idle(), "nothing to evict");
        let a = registry.admit(ip(1)).unwrap();
        let _busy = a.activity().begin();
        assert!(
            !registry.evict_one_idle(),
            "a busy connection is never evicted"
        );
        let b = registry.admit(ip(2)).unwrap();
        assert!(registry.evict_one_idle());
        assert!(b.evicted().is_cancelled());
        assert!(!a.evicted().is_cancelled());
        assert_eq!(registry.stats().open(), 1);
    }

    #[test]
    fn the_cap_is_at_least_one() {
        assert_eq!(Registry::new(0, 0).max(), 1);
        assert_eq!(Registry::new(5, 0).max(), 5);
    }

    #[test]
    fn the_counters_render_under_the_names_given() {
        let registry = Arc::new(Registry::new(3, 0));
        let _a = registry.admit(ip(1)).unwrap();
        let b = registry.admit(ip(2)).unwrap();
        let _busy = b.activity().begin();
        let _c = registry.admit(ip(3)).unwrap();
        // At the cap: one idle connection (a or c) makes room, then everything is busy.
        registry.note_accept_error();
        registry.note_accept_error();
        let _d = registry.admit(ip(4)).unwrap();
        let mut out = String::new();
        registry.stats().render(&mut out);
        for line in [
            "# HELP switchyard_http_connections Client connections open now.",
            "# TYPE switchyard_http_connections gauge",
            "switchyard_http_connections 3",
            "switchyard_http_connections_max 3",
            "switchyard_http_connections_refused_total 0",
            "switchyard_http_connections_evicted_total 1",
            "switchyard_http_accept_errors_total 2",
        ] {
            assert!(
                out.lines().any(|l| l == line),
                "{line:?} missing from\n{out}"
            );
        }
        let names = MetricNames {
            what: "Streams",
            open: "g_open",
            max: "g_max",
            refused: "g_refused",
            evicted: "g_evicted",
            accept_errors: "g_errors",
        };
        let mut out = String::new();
        registry.stats().render_as(&mut out, &names);
        assert!(
            out.starts_with("# HELP g_open Streams open now.\n"),
            "{out}"
        );
        assert!(out.lines().any(|l| l == "g_errors 2"), "{out}");
        assert!(!out.contains("switchyard_http"), "{out}");
    }

    #[test]
    fn leaving_frees_the_place_and_the_address_count() {
        let registry = Arc::new(Registry::new(1, 1));
        let a = registry.admit(ip(1)).unwrap();
        drop(a);
        assert_eq!(registry.stats().open(), 0);
        assert!(registry.lock().per_ip.is_empty());
    }
}
