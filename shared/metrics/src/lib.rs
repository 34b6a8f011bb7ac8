//! The Prometheus text exposition (format 0.0.4) of both planes: label and help escaping, a
//! [`Writer`] for `# HELP`/`# TYPE` headers and samples, the two recording types the request
//! path uses, [`Histogram`] and the labelled counter [`Family`], and the [`Registry`] a process's
//! `/metrics` renders: each component that has metrics is a [`Collect`]or registered once by
//! whoever builds it, and a scrape is one render over the registry.
//!
//! Our own module rather than the `prometheus-client` crate: a framework would add build time to
//! both binaries for the little we need, and its registries and encoders would sit between the
//! request path and plain atomics (its labelled families look a series up by an owned label set,
//! an allocation per increment where ours borrows the values; its text is OpenMetrics', not the
//! exact names and lines our dashboards and alerts read). Here recording is an atomic increment
//! (a family adds a read lock and a hash lookup without allocating), and the text is written only
//! when scraped: a collector reads its atomics then, and a registry holds no copy of any value.
//!
//! Every family is bounded by what writes it: label values come from fixed sets or from the
//! configuration (route patterns, channel, token and team names), never from request content.

use std::borrow::Cow;
use std::fmt::{self, Display, Write};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use hashbrown::{Equivalent, HashMap};

/// A metric family's type, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Counter,
    Gauge,
    Histogram,
}

impl Type {
    pub fn as_str(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        }
    }
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
pub fn escape(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    Cow::Owned(
        value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n"),
    )
}

/// A `# HELP` text in the exposition format: backslash and newline escaped (quotes stay).
pub fn escape_help(text: &str) -> Cow<'_, str> {
    if !text.contains(['\\', '\n']) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.replace('\\', "\\\\").replace('\n', "\\n"))
}

/// Appends exposition text to a page. Metric and label names are ours (constants), so they are
/// written as given; label values and help texts are escaped.
pub struct Writer<'a> {
    out: &'a mut String,
}

impl<'a> Writer<'a> {
    pub fn new(out: &'a mut String) -> Self {
        Writer { out }
    }

    /// `# HELP` and `# TYPE` of the family `name`; its samples follow.
    pub fn header(&mut self, name: &str, kind: Type, help: &str) -> &mut Self {
        let _ = writeln!(
            self.out,
            "# HELP {name} {}\n# TYPE {name} {}",
            escape_help(help),
            kind.as_str()
        );
        self
    }

    /// One sample: `name{label="value",…} value` (no braces without labels).
    pub fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        value: impl Display,
    ) -> &mut Self {
        self.line(name, "", labels, value)
    }

    /// A family of one unlabelled sample: its header and its value.
    pub fn single(&mut self, name: &str, kind: Type, help: &str, value: impl Display) -> &mut Self {
        self.header(name, kind, help).sample(name, &[], value)
    }

    /// An unlabelled counter.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) -> &mut Self {
        self.single(name, Type::Counter, help, value)
    }

    /// An unlabelled gauge.
    pub fn gauge(&mut self, name: &str, help: &str, value: impl Display) -> &mut Self {
        self.single(name, Type::Gauge, help, value)
    }

    fn line(
        &mut self,
        name: &str,
        suffix: &str,
        labels: &[(&str, &str)],
        value: impl Display,
    ) -> &mut Self {
        self.out.push_str(name);
        self.out.push_str(suffix);
        for (i, (label, v)) in labels.iter().enumerate() {
            self.out.push(if i == 0 { '{' } else { ',' });
            let _ = write!(self.out, "{label}=\"{}\"", escape(v));
        }
        if !labels.is_empty() {
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
        self
    }
}

/// A component with metrics: writes its families to a scrape's page, reading its own counters
/// then (recording stays the component's: atomics, never a call through the registry).
pub trait Collect: Send + Sync {
    fn collect(&self, w: &mut Writer<'_>);
}

/// A process's collectors, rendered in the order they were registered: `/metrics` is one
/// [`render`](Registry::render) over it.
#[derive(Default)]
pub struct Registry {
    collectors: RwLock<Vec<Arc<dyn Collect>>>,
}

impl Registry {
    /// Adds `collector` after the ones registered before it.
    pub fn register(&self, collector: Arc<dyn Collect>) {
        self.collectors
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(collector);
    }

    /// The page: every collector's families, in registration order.
    pub fn render(&self) -> String {
        let collectors = self
            .collectors
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut out = String::with_capacity(8192);
        let w = &mut Writer::new(&mut out);
        for collector in &collectors {
            collector.collect(w);
        }
        out
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.collectors.read().map_or(0, |c| c.len());
        f.debug_struct("Registry").field("collectors", &n).finish()
    }
}

/// The page of one collector alone (its families as `/metrics` shows them).
pub fn render(collector: &dyn Collect) -> String {
    let mut out = String::new();
    collector.collect(&mut Writer::new(&mut out));
    out
}

/// A lock-free histogram of durations recorded in microseconds and exposed in seconds. Bucket
/// bounds are upper bounds in microseconds (an observation equal to a bound is in its bucket).
pub struct Histogram<const N: usize> {
    bounds_us: [u64; N],
    /// Per bucket, not cumulative.
    counts: [AtomicU64; N],
    /// Above the last bound.
    overflow: AtomicU64,
    sum_us: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    /// `bounds_us` must be increasing.
    pub fn new(bounds_us: [u64; N]) -> Self {
        Histogram {
            bounds_us,
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            overflow: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    /// Records one observation: two atomic increments, no allocation.
    pub fn observe_micros(&self, micros: u64) {
        let slot = self.bounds_us.iter().position(|b| micros <= *b);
        slot.and_then(|i| self.counts.get(i))
            .unwrap_or(&self.overflow)
            .fetch_add(1, Relaxed);
        self.sum_us.fetch_add(micros, Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum::<u64>() + self.overflow.load(Relaxed)
    }

    /// The family `name`: cumulative `_bucket{le=…}` lines ending with `+Inf`, `_sum` in
    /// seconds and `_count`.
    pub fn render(&self, w: &mut Writer<'_>, name: &str, help: &str) {
        w.header(name, Type::Histogram, help);
        self.render_series(w, name, &[]);
    }

    /// This histogram's lines as the series `labels` of the family `name` (`le` follows them).
    fn render_series(&self, w: &mut Writer<'_>, name: &str, labels: &[(&str, &str)]) {
        // Written at a scrape only: a label list per line is no cost on the request path.
        let bucket = |w: &mut Writer<'_>, le: &str, count: u64| {
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", le));
            w.line(name, "_bucket", &with_le, count);
        };
        let mut cumulative = 0u64;
        for (bound, count) in self.bounds_us.iter().zip(&self.counts) {
            cumulative += count.load(Relaxed);
            bucket(w, &(*bound as f64 / 1e6).to_string(), cumulative);
        }
        let total = cumulative + self.overflow.load(Relaxed);
        bucket(w, "+Inf", total);
        w.line(name, "_sum", labels, self.sum_us.load(Relaxed) as f64 / 1e6);
        w.line(name, "_count", labels, total);
    }
}

/// A histogram family with `L` labels and `N` buckets (the same bounds for every series): an
/// observation takes a read lock and a hash lookup (no allocation) and the histogram's own two
/// atomic increments; a new series takes the write lock once.
pub struct HistogramFamily<const L: usize, const N: usize, S = RandomState> {
    name: &'static str,
    help: &'static str,
    labels: [&'static str; L],
    bounds_us: [u64; N],
    series: Series<L, Histogram<N>, S>,
}

impl<const L: usize, const N: usize, S: BuildHasher + Default> HistogramFamily<L, N, S> {
    /// `bounds_us` must be increasing (upper bounds in microseconds).
    pub fn new(
        name: &'static str,
        help: &'static str,
        labels: [&'static str; L],
        bounds_us: [u64; N],
    ) -> Self {
        HistogramFamily {
            name,
            help,
            labels,
            bounds_us,
            series: Series::new(),
        }
    }

    /// Records `micros` in the series of `values` (one per label, in order).
    pub fn observe_micros(&self, values: [&str; L], micros: u64) {
        self.series.with(
            values,
            || Histogram::new(self.bounds_us),
            |histogram| histogram.observe_micros(micros),
        );
    }

    /// Observations so far in the series of `values`.
    pub fn count(&self, values: [&str; L]) -> u64 {
        let series = self.series.read();
        series.get(&LabelsRef(values)).map_or(0, Histogram::count)
    }

    /// The family with every series so far, in the order of their label values (the header
    /// alone when none).
    pub fn render(&self, w: &mut Writer<'_>) {
        w.header(self.name, Type::Histogram, self.help);
        let series = self.series.read();
        let mut all: Vec<(&Labels<L>, &Histogram<N>)> = series.iter().collect();
        all.sort_unstable_by(|a, b| a.0 .0.cmp(&b.0 .0));
        for (values, histogram) in all {
            let labels: [(&str, &str); L] =
                std::array::from_fn(|i| (self.labels[i], &*values.0[i]));
            histogram.render_series(w, self.name, &labels);
        }
    }
}

impl<const L: usize, const N: usize, S> fmt::Debug for HistogramFamily<L, N, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistogramFamily")
            .field("name", &self.name)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl<const N: usize> fmt::Debug for Histogram<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Histogram")
            .field("bounds_us", &self.bounds_us)
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

/// A family's series by their label values: finding one takes a read lock and a hash lookup
/// that borrows the values (no allocation); a new one takes the write lock once.
struct Series<const L: usize, V, S> {
    map: RwLock<HashMap<Labels<L>, V, S>>,
}

impl<const L: usize, V, S: BuildHasher + Default> Series<L, V, S> {
    fn new() -> Self {
        Series {
            map: RwLock::new(HashMap::with_hasher(S::default())),
        }
    }

    /// Calls `f` with the series of `values`, made by `make` first when there is none.
    fn with(&self, values: [&str; L], make: impl FnOnce() -> V, f: impl FnOnce(&V)) {
        let key = LabelsRef(values);
        {
            let map = self.read();
            if let Some(value) = map.get(&key) {
                f(value);
                return;
            }
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        f(map
            .entry(Labels(values.map(Box::from)))
            .or_insert_with(make));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Labels<L>, V, S>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// The label values of one series, owned.
#[derive(Debug, PartialEq, Eq)]
struct Labels<const L: usize>([Box<str>; L]);

/// The same, borrowed: looked up without allocating.
struct LabelsRef<'a, const L: usize>([&'a str; L]);

fn hash_values<'a, H: Hasher>(values: impl Iterator<Item = &'a str>, state: &mut H) {
    for v in values {
        state.write(v.as_bytes());
        state.write_u8(0xff);
    }
}

impl<const L: usize> Hash for Labels<L> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_values(self.0.iter().map(|v| &**v), state);
    }
}

impl<const L: usize> Hash for LabelsRef<'_, L> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_values(self.0.iter().copied(), state);
    }
}

impl<const L: usize> Equivalent<Labels<L>> for LabelsRef<'_, L> {
    fn equivalent(&self, key: &Labels<L>) -> bool {
        self.0.iter().zip(key.0.iter()).all(|(a, b)| *a == &**b)
    }
}

/// A counter family with `L` labels. An update of an existing series takes a read lock and a
/// hash lookup (no allocation); a new series takes the write lock once. `S` hashes the label
/// values: a fast non-keyed hasher is fine where they never come from what a client sends.
pub struct Family<const L: usize, S = RandomState> {
    name: &'static str,
    help: &'static str,
    labels: [&'static str; L],
    series: Series<L, AtomicU64, S>,
}

impl<const L: usize, S: BuildHasher + Default> Family<L, S> {
    pub fn new(name: &'static str, help: &'static str, labels: [&'static str; L]) -> Self {
        Family {
            name,
            help,
            labels,
            series: Series::new(),
        }
    }

    /// Adds `n` to the series of `values` (one per label, in order), creating it at 0 first.
    pub fn add(&self, values: [&str; L], n: u64) {
        self.series.with(
            values,
            || AtomicU64::new(0),
            |counter| {
                counter.fetch_add(n, Relaxed);
            },
        );
    }

    /// The family with every series so far, sorted by their text (the header alone when none).
    pub fn render(&self, w: &mut Writer<'_>) {
        w.header(self.name, Type::Counter, self.help);
        let mut lines: Vec<String> = {
            let series = self.series.read();
            series
                .iter()
                .map(|(values, value)| {
                    let labels: [(&str, &str); L] =
                        std::array::from_fn(|i| (self.labels[i], &*values.0[i]));
                    let mut line = String::new();
                    Writer::new(&mut line).sample(self.name, &labels, value.load(Relaxed));
                    line
                })
                .collect()
        };
        lines.sort_unstable();
        for line in lines {
            w.out.push_str(&line);
        }
    }
}

impl<const L: usize, S> fmt::Debug for Family<L, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family")
            .field("name", &self.name)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn page(write: impl FnOnce(&mut Writer<'_>)) -> String {
        let mut out = String::new();
        write(&mut Writer::new(&mut out));
        out
    }

    struct Fixed(&'static str, u64);

    impl Collect for Fixed {
        fn collect(&self, w: &mut Writer<'_>) {
            w.counter(self.0, "help", self.1);
        }
    }

    #[test]
    fn a_registry_renders_its_collectors_in_registration_order_at_each_scrape() {
        let registry = Registry::default();
        assert_eq!(registry.render(), "");
        let counter = Arc::new(Family::<1>::new("c_total", "c", ["k"]));
        struct Counted(Arc<Family<1>>);
        impl Collect for Counted {
            fn collect(&self, w: &mut Writer<'_>) {
                self.0.render(w);
            }
        }
        registry.register(Arc::new(Fixed("b_total", 2)));
        registry.register(Arc::new(Counted(Arc::clone(&counter))));
        registry.register(Arc::new(Fixed("a_total", 1)));
        let first = registry.render();
        assert_eq!(
            first,
            "# HELP b_total help\n# TYPE b_total counter\nb_total 2\n\
             # HELP c_total c\n# TYPE c_total counter\n\
             # HELP a_total help\n# TYPE a_total counter\na_total 1\n"
        );
        // Values are read at the scrape, not at registration.
        counter.add(["x"], 3);
        assert!(registry.render().contains("c_total{k=\"x\"} 3\n"));
        assert_eq!(
            render(&Fixed("a_total", 1)),
            "# HELP a_total help\n# TYPE a_total counter\na_total 1\n"
        );
    }

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert!(matches!(escape("openai-a"), Cow::Borrowed("openai-a")));
        assert_eq!(escape(r"a\b"), r"a\\b");
        assert_eq!(escape("a\"b"), "a\\\"b");
        assert_eq!(escape("a\nb"), "a\\nb");
        assert_eq!(escape("\\\"\n"), "\\\\\\\"\\n");
        let text = page(|w| {
            w.sample("m", &[("channel", "a\"b\\c\nd"), ("outcome", "ok")], 1);
        });
        assert_eq!(text, "m{channel=\"a\\\"b\\\\c\\nd\",outcome=\"ok\"} 1\n");
    }

    #[test]
    fn help_escapes_backslash_and_newline_but_not_quotes() {
        assert_eq!(escape_help("say \"hi\""), "say \"hi\"");
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    #[test]
    fn counter_and_gauge_lines() {
        let text = page(|w| {
            w.counter("x_total", "Things done.", 3)
                .gauge("x_age_seconds", "Age.", 1.5)
                .header("x_by_kind_total", Type::Counter, "Things by kind.")
                .sample("x_by_kind_total", &[("kind", "a")], 2)
                .single("x_up", Type::Gauge, "1 when up.", 0);
        });
        assert_eq!(
            text,
            "# HELP x_total Things done.\n# TYPE x_total counter\nx_total 3\n\
             # HELP x_age_seconds Age.\n# TYPE x_age_seconds gauge\nx_age_seconds 1.5\n\
             # HELP x_by_kind_total Things by kind.\n# TYPE x_by_kind_total counter\n\
             x_by_kind_total{kind=\"a\"} 2\n\
             # HELP x_up 1 when up.\n# TYPE x_up gauge\nx_up 0\n"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf() {
        let h = Histogram::new([25, 150, 1_000]);
        for us in [10, 25, 26, 150, 5_000] {
            h.observe_micros(us);
        }
        assert_eq!(h.count(), 5);
        let text = page(|w| h.render(w, "lat_seconds", "Latency."));
        assert_eq!(
            text,
            "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n\
             lat_seconds_bucket{le=\"0.000025\"} 2\n\
             lat_seconds_bucket{le=\"0.00015\"} 4\n\
             lat_seconds_bucket{le=\"0.001\"} 4\n\
             lat_seconds_bucket{le=\"+Inf\"} 5\n\
             lat_seconds_sum 0.005211\n\
             lat_seconds_count 5\n"
        );
    }

    #[test]
    fn a_histogram_family_renders_each_series_with_its_labels_before_le() {
        let f: HistogramFamily<1, 2> =
            HistogramFamily::new("ttft_seconds", "TTFT.", ["channel"], [100_000, 1_000_000]);
        f.observe_micros(["b"], 50_000);
        f.observe_micros(["a\""], 2_000_000);
        f.observe_micros(["b"], 500_000);
        assert_eq!(f.count(["b"]), 2);
        assert_eq!(f.count(["c"]), 0);
        let text = page(|w| f.render(w));
        assert_eq!(
            text,
            "# HELP ttft_seconds TTFT.\n# TYPE ttft_seconds histogram\n\
             ttft_seconds_bucket{channel=\"a\\\"\",le=\"0.1\"} 0\n\
             ttft_seconds_bucket{channel=\"a\\\"\",le=\"1\"} 0\n\
             ttft_seconds_bucket{channel=\"a\\\"\",le=\"+Inf\"} 1\n\
             ttft_seconds_sum{channel=\"a\\\"\"} 2\n\
             ttft_seconds_count{channel=\"a\\\"\"} 1\n\
             ttft_seconds_bucket{channel=\"b\",le=\"0.1\"} 1\n\
             ttft_seconds_bucket{channel=\"b\",le=\"1\"} 2\n\
             ttft_seconds_bucket{channel=\"b\",le=\"+Inf\"} 2\n\
             ttft_seconds_sum{channel=\"b\"} 0.55\n\
             ttft_seconds_count{channel=\"b\"} 2\n"
        );
    }

    #[test]
    fn an_empty_histogram_has_every_bucket_at_zero() {
        let h = Histogram::new([1_000_000]);
        let text = page(|w| h.render(w, "h", "H."));
        assert!(
            text.contains("h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n")
        );
    }

    #[test]
    fn family_series_are_summed_sorted_and_escaped() {
        let f: Family<2> = Family::new("req_total", "Requests.", ["route", "code"]);
        f.add(["b", "2xx"], 1);
        f.add(["a\"", "5xx"], 1);
        f.add(["b", "2xx"], 2);
        let text = page(|w| f.render(w));
        assert_eq!(
            text,
            "# HELP req_total Requests.\n# TYPE req_total counter\n\
             req_total{route=\"a\\\"\",code=\"5xx\"} 1\n\
             req_total{route=\"b\",code=\"2xx\"} 3\n"
        );
        let empty: Family<1> = Family::new("none_total", "None yet.", ["x"]);
        assert_eq!(
            page(|w| empty.render(w)),
            "# HELP none_total None yet.\n# TYPE none_total counter\n"
        );
    }

    #[test]
    fn label_values_that_differ_only_in_where_they_split_are_two_series() {
        let f: Family<2> = Family::new("t", "T.", ["a", "b"]);
        f.add(["ab", "c"], 1);
        f.add(["a", "bc"], 1);
        let text = page(|w| f.render(w));
        assert!(text.contains("t{a=\"ab\",b=\"c\"} 1\n"), "{text}");
        assert!(text.contains("t{a=\"a\",b=\"bc\"} 1\n"), "{text}");
    }
}
