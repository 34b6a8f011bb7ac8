//! Limits and prices as configured: what a snapshot carries for the proxy to admit, refuse and
//! charge requests with. The counting itself (local allowances, the shared counters) lives in the
//! state store; these are the plain values both planes agree on.

use serde::{Deserialize, Serialize};

use crate::ids::{ChannelId, UnixMillis};
use crate::pattern::wildcard_match;

/// Whom a limit applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    Token,
    Team,
    Route,
    Channel,
    Member,
}

/// What a limit counts. Spend is in micro-USD (an exact integer, never a float).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    None,
    Minute,
    Hour,
    Day,
    Month,
}

/// Hard limits refuse requests beyond them; soft ones let them pass and report the crossing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitMode {
    Hard,
    Soft,
}

/// The identity of a limit's counter (shared by every proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LimitKey {
    pub scope: ScopeKind,
    pub scope_id: i64,
    pub metric: Metric,
    pub window: Window,
}

/// One limit as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    pub key: LimitKey,
    pub value: u64,
    pub mode: LimitMode,
}

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 86_400_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1..=12).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
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
        format!(
            "{}:{}:{}:{}",
            self.scope.as_str(),
            self.scope_id,
            self.metric.as_str(),
            self.window.as_str()
        )
    }

    /// A `concurrent` limit (slots held, released at the end of a request).
    pub fn concurrent(&self) -> bool {
        self.metric == Metric::Concurrent
    }

    /// The counting window holding `now`: `concurrent` has none (whatever window it names), and
    /// another metric with [`Window::None`] counts for ever.
    pub fn bounds(&self, now: UnixMillis) -> (UnixMillis, UnixMillis) {
        if self.concurrent() {
            Window::None.bounds(now)
        } else {
            self.window.bounds(now)
        }
    }
}

impl ScopeKind {
    pub const ALL: [ScopeKind; 5] = [
        ScopeKind::Token,
        ScopeKind::Team,
        ScopeKind::Route,
        ScopeKind::Channel,
        ScopeKind::Member,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Token => "token",
            ScopeKind::Team => "team",
            ScopeKind::Route => "route",
            ScopeKind::Channel => "channel",
            ScopeKind::Member => "member",
        }
    }

    pub fn parse(text: &str) -> Option<ScopeKind> {
        ScopeKind::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// An upstream limit (a provider's own quota): it makes members ineligible instead of
    /// refusing the client.
    pub fn upstream(self) -> bool {
        matches!(self, ScopeKind::Channel | ScopeKind::Member)
    }
}

impl Metric {
    pub const ALL: [Metric; 4] = [
        Metric::Requests,
        Metric::Tokens,
        Metric::Concurrent,
        Metric::Spend,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Requests => "requests",
            Metric::Tokens => "tokens",
            Metric::Concurrent => "concurrent",
            Metric::Spend => "spend",
        }
    }

    pub fn parse(text: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.as_str() == text)
    }

    /// The windows this metric may be counted over: none for `concurrent`; minute, hour or day
    /// for requests and tokens; day or month (UTC calendar) for spend.
    pub fn windows(self) -> &'static [Window] {
        match self {
            Metric::Concurrent => &[Window::None],
            Metric::Requests | Metric::Tokens => &[Window::Minute, Window::Hour, Window::Day],
            Metric::Spend => &[Window::Day, Window::Month],
        }
    }
}

impl Window {
    pub const ALL: [Window; 5] = [
        Window::None,
        Window::Minute,
        Window::Hour,
        Window::Day,
        Window::Month,
    ];

    pub fn parse(text: &str) -> Option<Window> {
        Window::ALL.into_iter().find(|w| w.as_str() == text)
    }
}

impl LimitMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitMode::Hard => "hard",
            LimitMode::Soft => "soft",
        }
    }

    pub fn parse(text: &str) -> Option<LimitMode> {
        match text {
            "hard" => Some(LimitMode::Hard),
            "soft" => Some(LimitMode::Soft),
            _ => None,
        }
    }
}

/// Largest value a limit may have (requests, tokens, slots, or micro-USD: 10⁹ USD).
pub const MAX_LIMIT_VALUE: u64 = 1_000_000_000_000_000;

impl Limit {
    /// Builds a limit from its text fields, checking each; the error names the field.
    /// `window` may be absent (or `none`) only for `concurrent`.
    pub fn parse(
        scope: &str,
        scope_id: i64,
        metric: &str,
        window: Option<&str>,
        value: u64,
        mode: &str,
    ) -> Result<Limit, (&'static str, String)> {
        let scope = ScopeKind::parse(scope).ok_or_else(|| {
            (
                "scope",
                format!("`{scope}` is not one of token, team, route, channel, member"),
            )
        })?;
        let metric = Metric::parse(metric).ok_or_else(|| {
            (
                "metric",
                format!("`{metric}` is not one of requests, tokens, concurrent, spend"),
            )
        })?;
        let window = match window {
            None => Window::None,
            Some(w) => Window::parse(w).ok_or_else(|| {
                (
                    "window",
                    format!("`{w}` is not one of minute, hour, day, month"),
                )
            })?,
        };
        let mode = LimitMode::parse(mode)
            .ok_or_else(|| ("mode", format!("`{mode}` is not one of hard, soft")))?;
        let limit = Limit {
            key: LimitKey {
                scope,
                scope_id,
                metric,
                window,
            },
            value,
            mode,
        };
        limit.check()?;
        Ok(limit)
    }

    /// Checks the window fits the metric and the value is in range; the error names the field.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let metric = self.key.metric;
        if !metric.windows().contains(&self.key.window) {
            let allowed: Vec<&str> = metric.windows().iter().map(|w| w.as_str()).collect();
            let message = if metric == Metric::Concurrent {
                "a `concurrent` limit has no window".to_owned()
            } else {
                format!(
                    "a `{}` limit counts per {}",
                    metric.as_str(),
                    allowed.join(" or ")
                )
            };
            return Err(("window", message));
        }
        if self.key.scope.upstream() && metric == Metric::Spend {
            return Err((
                "metric",
                "a channel or member limit counts requests, tokens or concurrent requests, not spend"
                    .to_owned(),
            ));
        }
        if !(1..=MAX_LIMIT_VALUE).contains(&self.value) {
            return Err(("value", format!("must be between 1 and {MAX_LIMIT_VALUE}")));
        }
        Ok(())
    }
}

/// A limit as an operator configured it: the counted [`Limit`] and its row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitRule {
    pub id: i64,
    pub limit: Limit,
}

/// Picounits: one USD is 10¹² pico-USD; a price of `p` micro-USD per million tokens is `p`
/// pico-USD per token, so a request's cost is an exact integer.
pub const PICO_PER_USD: u128 = 1_000_000_000_000;

/// A price per (channel, upstream model pattern), in micro-USD per million tokens (USD per
/// million × 10⁶, exact: six decimals of a USD-per-million figure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Price {
    pub id: i64,
    pub channel_id: ChannelId,
    /// `*`/`?` wildcards allowed, like route patterns.
    pub model_pattern: String,
    pub input_per_million: u64,
    pub output_per_million: u64,
    /// Cache-read input tokens; `None`: charged as other input.
    pub cached_input_per_million: Option<u64>,
}

impl Price {
    /// The cost of one request's usage in pico-USD. `input` includes the cached tokens.
    pub fn cost_pico(&self, input: u64, output: u64, cached: u64) -> u128 {
        let cached = cached.min(input);
        let cached_price = self
            .cached_input_per_million
            .unwrap_or(self.input_per_million);
        u128::from(input - cached) * u128::from(self.input_per_million)
            + u128::from(cached) * u128::from(cached_price)
            + u128::from(output) * u128::from(self.output_per_million)
    }

    /// How well the pattern fits `model`: an exact name first, then the wildcard with the most
    /// literal characters; `None` when it does not match.
    pub fn specificity(&self, model: &str) -> Option<usize> {
        if self.model_pattern == model {
            return Some(usize::MAX);
        }
        if !self.model_pattern.contains(['*', '?']) || !wildcard_match(&self.model_pattern, model) {
            return None;
        }
        Some(
            self.model_pattern
                .chars()
                .filter(|c| *c != '*' && *c != '?')
                .count(),
        )
    }
}

/// The price of `(channel, model)` among `prices`: the most specific pattern of that channel
/// (ties: the lowest id). `None`: the usage is unpriced.
pub fn price_for<'p>(prices: &'p [Price], channel: ChannelId, model: &str) -> Option<&'p Price> {
    prices
        .iter()
        .filter(|p| p.channel_id == channel)
        .filter_map(|p| Some((p.specificity(model)?, p)))
        .max_by(|(a, pa), (b, pb)| a.cmp(b).then(pb.id.cmp(&pa.id)))
        .map(|(_, p)| p)
}

/// Parses a decimal USD figure (`"2.50"`, `0.075`: a price per million tokens, a spend limit)
/// into micro-USD: at most six decimals, not negative, at most 10⁹ USD.
pub fn parse_usd_micros(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (whole, frac) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) {
        return Err(format!("`{text}` is not a non-negative decimal number"));
    }
    if frac.len() > 6 {
        return Err(format!("`{text}` has more than 6 decimals"));
    }
    let whole: u64 = whole
        .parse()
        .ok()
        .filter(|w| *w <= 1_000_000_000)
        .ok_or_else(|| format!("`{text}` is above 1000000000"))?;
    let mut scaled = frac.to_owned();
    while scaled.len() < 6 {
        scaled.push('0');
    }
    let frac: u64 = scaled.parse().unwrap_or(0);
    Ok(whole * 1_000_000 + frac)
}

/// Parses an RFC 3339 timestamp (`2027-01-31T23:59:59Z`, `…+02:00`, fractional seconds up to
/// milliseconds kept) into Unix ms; `None` when it is not one or lies before 1970.
pub fn parse_rfc3339(text: &str) -> Option<UnixMillis> {
    let b = text.trim().as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let sep = |at: usize, c: &[u8]| b.get(at).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        1..=12 => 31,
        _ => return None,
    };
    if !(1..=month_days).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut at = 19;
    let mut millis = 0i64;
    if sep(at, b".") {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            if at - start < 3 {
                millis = millis * 10 + i64::from(b[at] - b'0');
            }
            at += 1;
        }
        if at == start {
            return None;
        }
        for _ in (at - start)..3 {
            millis *= 10;
        }
    }
    let offset_s = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), ..] if b.len() == at + 6 && sep(at + 3, b":") => {
            let (h, m) = (num(at + 1, 2)?, num(at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let s = h * 3600 + m * 60;
            if *sign == b'+' {
                s
            } else {
                -s
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_s;
    u64::try_from(seconds * 1000 + millis).ok()
}

/// Unix ms as an RFC 3339 UTC timestamp with seconds (`2027-01-31T23:59:59Z`).
pub fn format_rfc3339(ms: UnixMillis) -> String {
    let seconds = ms / 1000;
    let days = (seconds / 86_400) as i64;
    let (year, month) = year_month(days);
    let day = days - days_from_civil(year, month, 1) + 1;
    let rest = seconds % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// A micro-unit figure as a decimal with six places trimmed of trailing zeros (`2500000` →
/// `"2.5"`).
pub fn format_micros(micros: u64) -> String {
    format_scaled(u128::from(micros), 6)
}

/// A pico-USD amount as a decimal USD string (`1500000000` → `"0.0015"`).
pub fn format_pico_usd(pico: u128) -> String {
    format_scaled(pico, 12)
}

fn format_scaled(value: u128, places: u32) -> String {
    let unit = 10u128.pow(places);
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:0width$}", width = places as usize);
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2023-11-14T22:13:20Z.
    const NOW: UnixMillis = 1_700_000_000_000;

    #[test]
    fn windows_are_utc_calendar_windows() {
        assert_eq!(
            Window::Minute.bounds(NOW),
            (1_699_999_980_000, 1_700_000_040_000)
        );
        assert_eq!(
            Window::Hour.bounds(NOW),
            (1_699_999_200_000, 1_700_002_800_000)
        );
        assert_eq!(
            Window::Day.bounds(NOW),
            (1_699_920_000_000, 1_700_006_400_000)
        );
        // November 2023; a leap February; December into January; the epoch's month.
        assert_eq!(
            Window::Month.bounds(NOW),
            (1_698_796_800_000, 1_701_388_800_000)
        );
        assert_eq!(
            Window::Month.bounds(1_709_251_199_999),
            (1_706_745_600_000, 1_709_251_200_000)
        );
        assert_eq!(
            Window::Month.bounds(1_703_980_800_000),
            (1_701_388_800_000, 1_704_067_200_000)
        );
        assert_eq!(Window::Month.bounds(0), (0, 2_678_400_000));
        assert_eq!(Window::None.bounds(NOW), (0, u64::MAX));
        // The first instant of a window is in it; the last is too.
        assert_eq!(
            Window::Minute.bounds(1_699_999_980_000).0,
            1_699_999_980_000
        );
        assert_eq!(
            Window::Minute.bounds(1_700_000_039_999).1,
            1_700_000_040_000
        );
    }

    #[test]
    fn every_month_from_1970_to_2500_is_the_calendars() {
        // A plain calendar walk: month lengths and the Gregorian leap rule.
        let leap =
            |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
        let mut start = 0u64;
        for year in 1970..2500u64 {
            for month in 1..=12u64 {
                let days = match month {
                    2 if leap(year) => 29,
                    2 => 28,
                    4 | 6 | 9 | 11 => 30,
                    _ => 31,
                };
                let end = start + days * DAY_MS;
                for at in [start, start + 12 * HOUR_MS, end - 1] {
                    assert_eq!(
                        Window::Month.bounds(at),
                        (start, end),
                        "{year}-{month:02} at {at}"
                    );
                }
                start = end;
            }
        }
    }

    #[test]
    fn names_say_scope_id_metric_and_window() {
        let mut key = LimitKey {
            scope: ScopeKind::Token,
            scope_id: 42,
            metric: Metric::Tokens,
            window: Window::Hour,
        };
        assert_eq!(key.name(), "token:42:tokens:hour");
        for (scope, name) in [
            (ScopeKind::Team, "team"),
            (ScopeKind::Route, "route"),
            (ScopeKind::Channel, "channel"),
            (ScopeKind::Member, "member"),
        ] {
            key.scope = scope;
            assert!(key.name().starts_with(&format!("{name}:42:")));
        }
        for (metric, window, tail) in [
            (Metric::Requests, Window::Minute, "requests:minute"),
            (Metric::Concurrent, Window::None, "concurrent:none"),
            (Metric::Spend, Window::Day, "spend:day"),
            (Metric::Spend, Window::Month, "spend:month"),
        ] {
            key.metric = metric;
            key.window = window;
            assert!(key.name().ends_with(tail), "{}", key.name());
        }
    }

    fn price(id: i64, pattern: &str) -> Price {
        Price {
            id,
            channel_id: 1,
            model_pattern: pattern.into(),
            input_per_million: 2_500_000,
            output_per_million: 10_000_000,
            cached_input_per_million: Some(1_250_000),
        }
    }

    #[test]
    fn every_name_parses_back_to_its_value_and_nothing_else_parses() {
        for scope in ScopeKind::ALL {
            assert_eq!(ScopeKind::parse(scope.as_str()), Some(scope));
        }
        for metric in Metric::ALL {
            assert_eq!(Metric::parse(metric.as_str()), Some(metric));
        }
        for window in Window::ALL {
            assert_eq!(Window::parse(window.as_str()), Some(window));
        }
        for mode in [LimitMode::Hard, LimitMode::Soft] {
            assert_eq!(LimitMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(ScopeKind::parse("fleet"), None);
        assert_eq!(Metric::parse("Requests"), None);
        assert_eq!(Window::parse("week"), None);
        assert_eq!(LimitMode::parse(""), None);
        let upstream: Vec<bool> = ScopeKind::ALL.iter().map(|s| s.upstream()).collect();
        assert_eq!(upstream, [false, false, false, true, true]);
    }

    #[test]
    fn a_limit_parses_only_with_a_window_its_metric_counts_over() {
        let ok = |metric, window| Limit::parse("team", 7, metric, window, 10, "soft");
        let limit = ok("requests", Some("minute")).unwrap();
        assert_eq!(
            limit,
            Limit {
                key: LimitKey {
                    scope: ScopeKind::Team,
                    scope_id: 7,
                    metric: Metric::Requests,
                    window: Window::Minute,
                },
                value: 10,
                mode: LimitMode::Soft,
            }
        );
        for (metric, window) in [
            ("requests", "hour"),
            ("requests", "day"),
            ("tokens", "minute"),
            ("tokens", "hour"),
            ("tokens", "day"),
            ("spend", "day"),
            ("spend", "month"),
        ] {
            assert!(ok(metric, Some(window)).is_ok(), "{metric} per {window}");
        }
        assert_eq!(
            ok("concurrent", None).unwrap().key.window,
            Window::None,
            "no window: `none`"
        );
        let field = |r: Result<Limit, (&'static str, String)>| r.unwrap_err().0;
        assert_eq!(field(ok("requests", Some("month"))), "window");
        assert_eq!(field(ok("requests", None)), "window");
        assert_eq!(field(ok("spend", Some("hour"))), "window");
        assert_eq!(field(ok("concurrent", Some("minute"))), "window");
        assert_eq!(field(ok("requests", Some("fortnight"))), "window");
        assert_eq!(field(ok("bytes", Some("minute"))), "metric");
        assert_eq!(
            field(Limit::parse(
                "fleet",
                1,
                "requests",
                Some("minute"),
                1,
                "hard"
            )),
            "scope"
        );
        assert_eq!(
            field(Limit::parse(
                "team",
                1,
                "requests",
                Some("minute"),
                1,
                "strict"
            )),
            "mode"
        );
        for bad in [0, MAX_LIMIT_VALUE + 1] {
            assert_eq!(
                field(Limit::parse(
                    "team",
                    1,
                    "requests",
                    Some("minute"),
                    bad,
                    "hard"
                )),
                "value"
            );
        }
        assert!(Limit::parse(
            "team",
            1,
            "requests",
            Some("minute"),
            MAX_LIMIT_VALUE,
            "hard"
        )
        .is_ok());
        assert!(Limit::parse("team", 1, "requests", Some("minute"), 1, "hard").is_ok());
        // A provider's quota counts requests, tokens or slots; spend belongs to clients.
        assert_eq!(
            field(Limit::parse("channel", 1, "spend", Some("day"), 5, "hard")),
            "metric"
        );
        assert_eq!(
            field(Limit::parse("member", 1, "spend", Some("month"), 5, "hard")),
            "metric"
        );
        assert!(Limit::parse("member", 1, "tokens", Some("minute"), 5, "hard").is_ok());
        assert!(Limit::parse("route", 1, "spend", Some("month"), 5, "hard").is_ok());
        let message = ok("concurrent", Some("minute")).unwrap_err().1;
        assert_eq!(message, "a `concurrent` limit has no window");
        let message = ok("tokens", Some("month")).unwrap_err().1;
        assert_eq!(message, "a `tokens` limit counts per minute or hour or day");
    }

    #[test]
    fn a_concurrent_key_counts_for_ever_whatever_window_it_names() {
        let mut key = LimitKey {
            scope: ScopeKind::Token,
            scope_id: 1,
            metric: Metric::Concurrent,
            window: Window::Minute,
        };
        assert!(key.concurrent());
        assert_eq!(key.bounds(NOW), (0, u64::MAX));
        key.metric = Metric::Requests;
        assert!(!key.concurrent());
        assert_eq!(key.bounds(NOW), Window::Minute.bounds(NOW));
    }

    #[test]
    fn rfc3339_timestamps_parse_to_unix_ms_and_back() {
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(NOW));
        assert_eq!(parse_rfc3339("2023-11-14t22:13:20z"), Some(NOW));
        assert_eq!(parse_rfc3339("2023-11-14 22:13:20Z"), Some(NOW));
        assert_eq!(parse_rfc3339("2023-11-15T00:13:20+02:00"), Some(NOW));
        assert_eq!(parse_rfc3339("2023-11-14T20:43:20-01:30"), Some(NOW));
        assert_eq!(parse_rfc3339("2023-11-15T22:12:20+23:59"), Some(NOW));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.5Z"), Some(NOW + 500));
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20.123456Z"),
            Some(NOW + 123)
        );
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.07Z"), Some(NOW + 70));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z"),
            Some(1_709_164_800_000)
        );
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400_000));
        assert_eq!(
            parse_rfc3339("2023-12-31T23:59:60Z"),
            parse_rfc3339("2023-12-31T23:59:59Z")
        );
        assert_eq!(
            parse_rfc3339("2023-12-31T23:59:59Z"),
            Some(1_704_067_199_000)
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20+0200",
            "2023-11-14T22:13:20+24:00",
            "2023-11-14T22:13:20+02:60",
            "2023-11-14T22:13:20.Z",
            "2023-13-14T22:13:20Z",
            "2023-00-14T22:13:20Z",
            "2023-02-29T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2023-04-31T00:00:00Z",
            "2023-11-00T22:13:20Z",
            "2023-11-14T24:13:20Z",
            "2023-11-14T22:60:20Z",
            "2023-11-14T22:13:61Z",
            "2023/11/14T22:13:20Z",
            "2023-11-14X22:13:20Z",
            "2023-11-14T22-13:20Z",
            "2023-11-14T22:13-20Z",
            "1969-12-31T23:59:59Z",
            "2023-11-14T22:13:20Zjunk",
            "2023-11-14T22:13:20+02:00x",
            "2023-11-14T22:13:20+02000",
            "2023-11-14T22:13:20+02:0",
            "20x3-11-14T22:13:20Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(format_rfc3339(NOW), "2023-11-14T22:13:20Z");
        assert_eq!(format_rfc3339(NOW + 999), "2023-11-14T22:13:20Z");
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_709_164_800_000), "2024-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(1_704_067_199_000), "2023-12-31T23:59:59Z");
    }

    #[test]
    fn decimals_parse_exactly_and_refuse_what_is_not_one() {
        assert_eq!(parse_usd_micros("2.50"), Ok(2_500_000));
        assert_eq!(parse_usd_micros("0.075"), Ok(75_000));
        assert_eq!(parse_usd_micros("15"), Ok(15_000_000));
        assert_eq!(parse_usd_micros("0.000001"), Ok(1));
        assert_eq!(parse_usd_micros("1000000000"), Ok(1_000_000_000_000_000));
        for bad in [
            "-1",
            "1e3",
            "",
            ".5",
            "1.",
            "0.0000001",
            "abc",
            "1000000001",
        ] {
            assert!(parse_usd_micros(bad).is_err(), "{bad}");
        }
        assert_eq!(format_micros(2_500_000), "2.5");
        assert_eq!(format_micros(75_000), "0.075");
        assert_eq!(format_micros(15_000_000), "15");
        assert_eq!(format_pico_usd(1_500_000_000), "0.0015");
        assert_eq!(format_pico_usd(0), "0");
    }

    #[test]
    fn cost_is_exact_and_charges_cached_input_at_its_own_price() {
        let p = price(1, "gpt-4o");
        // 1000 input (200 cached), 500 output: 800×2.5 + 200×1.25 + 500×10 USD per million.
        let cost = p.cost_pico(1000, 500, 200);
        assert_eq!(format_pico_usd(cost), "0.00725");
        let plain = Price {
            cached_input_per_million: None,
            ..p
        };
        assert_eq!(format_pico_usd(plain.cost_pico(1000, 500, 200)), "0.0075");
    }

    #[test]
    fn the_most_specific_pattern_of_the_channel_prices_a_model() {
        let prices = vec![
            price(1, "*"),
            price(2, "gpt-4o*"),
            price(3, "gpt-4o-mini"),
            Price {
                channel_id: 2,
                ..price(4, "gpt-4o-mini")
            },
        ];
        assert_eq!(price_for(&prices, 1, "gpt-4o-mini").map(|p| p.id), Some(3));
        assert_eq!(price_for(&prices, 1, "gpt-4o-2024").map(|p| p.id), Some(2));
        assert_eq!(price_for(&prices, 1, "claude").map(|p| p.id), Some(1));
        assert_eq!(price_for(&prices, 3, "gpt-4o-mini"), None);
        // Specificity counts literal characters, not wildcards: `ab*` (2) beats `a??*` (1)
        // although it is the shorter pattern.
        let prices = vec![price(5, "a??*"), price(6, "ab*")];
        assert_eq!(price_for(&prices, 1, "abcd").map(|p| p.id), Some(6));
        assert_eq!(price(7, "a?c").specificity("abc"), Some(2));
        assert_eq!(price(8, "abc").specificity("abc"), Some(usize::MAX));
        assert_eq!(
            price(9, "abc").specificity("abd"),
            None,
            "a literal pattern matches itself only"
        );
    }
}
