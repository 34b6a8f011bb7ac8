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
    /// Every request carrying a tag.
    Tag,
    /// One end user's requests, or each end user's on a counter of its own.
    EndUser,
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

/// The counting window: UTC calendar windows (minute, hour, day, ISO week from Monday 00:00,
/// month), a rolling window of the last N UTC days (`Rolling(N)`, N in
/// [`ROLLING_DAYS`]: per-day buckets summed over the current day and the N − 1 before it, so it
/// slides a day at a time at midnight UTC); `None` for `concurrent`, which counts what is in
/// progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    None,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Rolling(u8),
}

/// The day counts a rolling window may have (`2d` … `90d`; one day is the calendar `day`).
pub const ROLLING_DAYS: std::ops::RangeInclusive<u8> = 2..=90;

/// The names of rolling windows, by day count (index 0 and 1 unused).
const ROLLING_NAMES: [&str; 91] = [
    "0d", "1d", "2d", "3d", "4d", "5d", "6d", "7d", "8d", "9d", "10d", "11d", "12d", "13d", "14d",
    "15d", "16d", "17d", "18d", "19d", "20d", "21d", "22d", "23d", "24d", "25d", "26d", "27d",
    "28d", "29d", "30d", "31d", "32d", "33d", "34d", "35d", "36d", "37d", "38d", "39d", "40d",
    "41d", "42d", "43d", "44d", "45d", "46d", "47d", "48d", "49d", "50d", "51d", "52d", "53d",
    "54d", "55d", "56d", "57d", "58d", "59d", "60d", "61d", "62d", "63d", "64d", "65d", "66d",
    "67d", "68d", "69d", "70d", "71d", "72d", "73d", "74d", "75d", "76d", "77d", "78d", "79d",
    "80d", "81d", "82d", "83d", "84d", "85d", "86d", "87d", "88d", "89d", "90d",
];

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
    /// A limit narrowed to a model pattern or a route ([`LimitOnly`]) counts on a counter of its
    /// own, named by its id; `None`: a plain limit, one per scope, metric and window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<i64>,
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
/// One UTC day in ms: the bucket a rolling window counts by.
pub const DAY_MS: u64 = 86_400_000;
/// 1970-01-01 was a Thursday: days since the epoch plus this, modulo 7, is days since Monday.
const EPOCH_WEEKDAY: u64 = 3;

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
    /// `[start, end)` of the window holding `now` (UTC); `(0, u64::MAX)` for `None`. A rolling
    /// window's is its current day bucket: counting starts over there for what the oldest day
    /// held (see [`Window::first_day`]).
    pub fn bounds(self, now: UnixMillis) -> (UnixMillis, UnixMillis) {
        let fixed = |len: u64| {
            let start = now - now % len;
            (start, start + len)
        };
        match self {
            Window::None => (0, u64::MAX),
            Window::Minute => fixed(MINUTE_MS),
            Window::Hour => fixed(HOUR_MS),
            Window::Day | Window::Rolling(_) => fixed(DAY_MS),
            Window::Week => {
                let days = now / DAY_MS;
                // Signed: the epoch's first days belong to a week that began before it.
                let monday = days as i64 - ((days + EPOCH_WEEKDAY) % 7) as i64;
                let ms = |day: i64| u64::try_from(day).unwrap_or(0) * DAY_MS;
                (ms(monday), ms(monday + 7))
            }
            Window::Month => {
                let (y, m) = year_month((now / DAY_MS) as i64);
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                let day = |y, m| days_from_civil(y, m, 1) as u64 * DAY_MS;
                (day(y, m), day(ny, nm))
            }
        }
    }

    /// A rolling window's day count; `None` for a calendar window.
    pub fn rolling_days(self) -> Option<u64> {
        match self {
            Window::Rolling(days) => Some(u64::from(days)),
            _ => None,
        }
    }

    /// The first day bucket (its start, Unix ms) a rolling window holding `now` counts: the
    /// current day and the N − 1 before it. A calendar window's own start.
    pub fn first_day(self, now: UnixMillis) -> UnixMillis {
        let (start, _) = self.bounds(now);
        match self.rolling_days() {
            Some(days) => start.saturating_sub((days - 1) * DAY_MS),
            None => start,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Window::None => "none",
            Window::Minute => "minute",
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Week => "week",
            Window::Month => "month",
            Window::Rolling(days) => ROLLING_NAMES
                .get(usize::from(days))
                .copied()
                .unwrap_or("rolling"),
        }
    }
}

impl LimitKey {
    /// The key's name in the shared store: `scope:id:metric:window`, and `:r<id>` for a
    /// narrowed limit.
    pub fn name(&self) -> String {
        let plain = format!(
            "{}:{}:{}:{}",
            self.scope.as_str(),
            self.scope_id,
            self.metric.as_str(),
            self.window.as_str()
        );
        match self.rule {
            Some(id) => format!("{plain}:r{id}"),
            None => plain,
        }
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
    pub const ALL: [ScopeKind; 7] = [
        ScopeKind::Token,
        ScopeKind::Team,
        ScopeKind::Route,
        ScopeKind::Channel,
        ScopeKind::Member,
        ScopeKind::Tag,
        ScopeKind::EndUser,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Token => "token",
            ScopeKind::Team => "team",
            ScopeKind::Route => "route",
            ScopeKind::Channel => "channel",
            ScopeKind::Member => "member",
            ScopeKind::Tag => "tag",
            ScopeKind::EndUser => "end_user",
        }
    }

    pub fn parse(text: &str) -> Option<ScopeKind> {
        ScopeKind::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// A tag or end user limit: found by what a request says about itself (its tags, its end
    /// user) rather than by an id.
    pub fn attributed(self) -> bool {
        matches!(self, ScopeKind::Tag | ScopeKind::EndUser)
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

    /// Whether this metric may be counted over `window`: none for `concurrent`; minute, hour,
    /// day, week or a rolling window for requests and tokens; day, week, month (UTC calendar) or
    /// a rolling window for spend.
    pub fn counts_over(self, window: Window) -> bool {
        match (self, window) {
            (Metric::Concurrent, w) => w == Window::None,
            (_, Window::Rolling(days)) => ROLLING_DAYS.contains(&days),
            (_, Window::Day | Window::Week) => true,
            (Metric::Requests | Metric::Tokens, w) => matches!(w, Window::Minute | Window::Hour),
            (Metric::Spend, w) => w == Window::Month,
        }
    }

    /// The windows [`Metric::counts_over`] allows, for an error message.
    pub fn window_names(self) -> &'static str {
        match self {
            Metric::Concurrent => "none",
            Metric::Requests | Metric::Tokens => "minute, hour, day, week or 2d to 90d",
            Metric::Spend => "day, week, month or 2d to 90d",
        }
    }
}

impl Window {
    /// The calendar windows (rolling ones are `Rolling(2..=90)`).
    pub const CALENDAR: [Window; 6] = [
        Window::None,
        Window::Minute,
        Window::Hour,
        Window::Day,
        Window::Week,
        Window::Month,
    ];

    /// A window's name: a calendar window's, or `Nd` (N days, rolling) with N in
    /// [`ROLLING_DAYS`].
    pub fn parse(text: &str) -> Option<Window> {
        if let Some(w) = Window::CALENDAR.into_iter().find(|w| w.as_str() == text) {
            return Some(w);
        }
        let digits = text.strip_suffix('d')?;
        if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let days: u8 = digits.parse().ok()?;
        ROLLING_DAYS
            .contains(&days)
            .then_some(Window::Rolling(days))
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
                format!(
                    "`{scope}` is not one of token, team, route, channel, member, tag, end_user"
                ),
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
                    format!("`{w}` is not one of minute, hour, day, week, month or 2d to 90d"),
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
                rule: None,
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
        if !metric.counts_over(self.key.window) {
            let message = if metric == Metric::Concurrent {
                "a `concurrent` limit has no window".to_owned()
            } else {
                format!(
                    "a `{}` limit counts per {}",
                    metric.as_str(),
                    metric.window_names()
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

/// A limit as an operator configured it: the counted [`Limit`], its row id and what it is
/// narrowed to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitRule {
    pub id: i64,
    pub limit: Limit,
    #[serde(default)]
    pub only: LimitOnly,
    /// A `tag` limit's tag; an `end_user` limit's end user (`None`: each end user separately).
    /// `None` for every other scope (`subject::subject_of` checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl LimitRule {
    /// A rule: a narrowed one's key names its id (a counter of its own), and so does a tag or
    /// end user limit's, whose scope id is not an id (0; an each-end-user limit's counter takes
    /// the end user's counter id per request).
    pub fn new(id: i64, mut limit: Limit, only: LimitOnly) -> LimitRule {
        let attributed = limit.key.scope.attributed();
        if attributed {
            limit.key.scope_id = 0;
        }
        limit.key.rule = (attributed || !only.is_plain()).then_some(id);
        LimitRule {
            id,
            limit,
            only,
            subject: None,
        }
    }

    /// The rule with its tag or end user (see [`LimitRule::subject`]).
    pub fn about(mut self, subject: Option<String>) -> LimitRule {
        self.subject = subject;
        self
    }
}

/// What a limit is narrowed to within its scope: only requests for models matching a pattern
/// (`*`/`?` wildcards, matched against the model the client asked for), only requests through
/// one route, or both. Neither: every request of the scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct LimitOnly {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_id: Option<i64>,
}

impl LimitOnly {
    /// Not narrowed: the limit applies to every request of its scope.
    pub fn is_plain(&self) -> bool {
        self.model_pattern.is_none() && self.route_id.is_none()
    }

    /// Whether a request for `model` (`None`: not known, as on a pass-through path) through
    /// `route` is one this limit counts.
    pub fn applies(&self, model: Option<&str>, route: Option<i64>) -> bool {
        let model_ok = match (&self.model_pattern, model) {
            (None, _) => true,
            (Some(pattern), Some(model)) => wildcard_match(pattern, model),
            (Some(_), None) => false,
        };
        model_ok && self.route_id.is_none_or(|id| route == Some(id))
    }

    /// Which scopes may be narrowed how: a model pattern on a token, team, route, tag or end
    /// user limit, a route on a token, team, tag or end user limit; the error names the field.
    pub fn check(&self, scope: ScopeKind) -> Result<(), (&'static str, String)> {
        if let Some(pattern) = &self.model_pattern {
            if scope.upstream() {
                return Err((
                    "model_pattern",
                    "only a token, team, route, tag or end user limit can be narrowed to models"
                        .to_owned(),
                ));
            }
            crate::pattern::validate_pattern(pattern).map_err(|e| ("model_pattern", e))?;
        }
        if self.route_id.is_some()
            && !matches!(
                scope,
                ScopeKind::Token | ScopeKind::Team | ScopeKind::Tag | ScopeKind::EndUser
            )
        {
            return Err((
                "route_id",
                "only a token, team, tag or end user limit can be narrowed to a route".to_owned(),
            ));
        }
        Ok(())
    }
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
    fn weeks_are_iso_weeks_from_monday_midnight_utc() {
        // Tuesday 2023-11-14: Monday the 13th to Monday the 20th.
        let week = (1_699_833_600_000, 1_700_438_400_000);
        assert_eq!(Window::Week.bounds(NOW), week);
        assert_eq!(Window::Week.bounds(week.0), week, "Monday 00:00 opens it");
        assert_eq!(Window::Week.bounds(week.1 - 1), week, "Sunday 23:59:59.999");
        assert_eq!(
            Window::Week.bounds(week.1).0,
            week.1,
            "the next Monday opens the next"
        );
        // Across a year's end: Monday 2024-12-30 to Monday 2025-01-06.
        assert_eq!(
            Window::Week.bounds(1_735_732_800_000),
            (1_735_516_800_000, 1_736_121_600_000)
        );
        // The epoch (a Thursday) is in a week that began before it; the next starts on day 4.
        assert_eq!(Window::Week.bounds(0), (0, 4 * DAY_MS));
        assert_eq!(Window::Week.bounds(4 * DAY_MS - 1), (0, 4 * DAY_MS));
        assert_eq!(Window::Week.bounds(4 * DAY_MS), (4 * DAY_MS, 11 * DAY_MS));
        // Every day of some weeks: seven days, starting on a Monday.
        for day in 4..4 + 7 * 60 {
            let (start, end) = Window::Week.bounds(day * DAY_MS + 5);
            assert_eq!(end - start, 7 * DAY_MS);
            assert_eq!((start / DAY_MS - 4) % 7, 0, "day {day}");
            assert!(start <= day * DAY_MS && day * DAY_MS < end);
        }
        assert_eq!(Window::Week.first_day(NOW), week.0);
    }

    #[test]
    fn a_rolling_window_counts_the_current_day_and_the_days_before_it() {
        let today = (1_699_920_000_000, 1_700_006_400_000);
        let seven = Window::Rolling(7);
        assert_eq!(seven.bounds(NOW), today, "its bucket is the UTC day");
        assert_eq!(seven.rolling_days(), Some(7));
        assert_eq!(
            seven.first_day(NOW),
            today.0 - 6 * DAY_MS,
            "2023-11-08T00:00Z"
        );
        assert_eq!(seven.first_day(NOW), 1_699_401_600_000);
        assert_eq!(Window::Rolling(2).first_day(NOW), today.0 - DAY_MS);
        assert_eq!(
            Window::Rolling(90).first_day(1_000),
            0,
            "not before the epoch"
        );
        assert_eq!(Window::Day.first_day(NOW), today.0);
        assert_eq!(Window::Day.rolling_days(), None);
        assert_eq!(Window::Week.rolling_days(), None);
        assert_eq!(Window::Month.first_day(NOW), 1_698_796_800_000);
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
            rule: None,
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
        for window in Window::CALENDAR {
            assert_eq!(Window::parse(window.as_str()), Some(window));
        }
        for days in ROLLING_DAYS {
            let window = Window::Rolling(days);
            assert_eq!(Window::parse(window.as_str()), Some(window));
            assert_eq!(window.as_str(), format!("{days}d"));
        }
        for mode in [LimitMode::Hard, LimitMode::Soft] {
            assert_eq!(LimitMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(ScopeKind::parse("fleet"), None);
        assert_eq!(Metric::parse("Requests"), None);
        for bad in [
            "fortnight",
            "1d",
            "91d",
            "0d",
            "07d",
            "d",
            "7",
            "-7d",
            "7D",
            "300d",
            "+7d",
        ] {
            assert_eq!(Window::parse(bad), None, "{bad}");
        }
        assert_eq!(Window::parse("week"), Some(Window::Week));
        assert_eq!(Window::parse("90d"), Some(Window::Rolling(90)));
        assert_eq!(Window::parse("2d"), Some(Window::Rolling(2)));
        assert_eq!(Window::Rolling(1).as_str(), "1d");
        assert_eq!(
            Window::Rolling(91).as_str(),
            "rolling",
            "out of range: no name of its own"
        );
        assert_eq!(LimitMode::parse(""), None);
        let upstream: Vec<bool> = ScopeKind::ALL.iter().map(|s| s.upstream()).collect();
        assert_eq!(upstream, [false, false, false, true, true, false, false]);
        let attributed: Vec<bool> = ScopeKind::ALL.iter().map(|s| s.attributed()).collect();
        assert_eq!(attributed, [false, false, false, false, false, true, true]);
        assert_eq!(ScopeKind::parse("tag"), Some(ScopeKind::Tag));
        assert_eq!(ScopeKind::parse("end_user"), Some(ScopeKind::EndUser));
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
                    rule: None,
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
        assert_eq!(
            message,
            "a `tokens` limit counts per minute, hour, day, week or 2d to 90d"
        );
        let message = ok("spend", Some("minute")).unwrap_err().1;
        assert_eq!(
            message,
            "a `spend` limit counts per day, week, month or 2d to 90d"
        );
        let message = ok("requests", Some("fortnight")).unwrap_err().1;
        assert_eq!(
            message,
            "`fortnight` is not one of minute, hour, day, week, month or 2d to 90d"
        );
        for metric in ["requests", "tokens", "spend"] {
            for window in ["week", "7d", "30d", "2d", "90d"] {
                assert!(ok(metric, Some(window)).is_ok(), "{metric} per {window}");
            }
        }
        assert_eq!(field(ok("concurrent", Some("week"))), "window");
        assert_eq!(field(ok("concurrent", Some("7d"))), "window");
        assert_eq!(field(ok("spend", Some("minute"))), "window");
        // A rolling window built past the parser is still checked.
        for days in [0, 1, 91] {
            let mut limit = ok("spend", Some("7d")).unwrap();
            limit.key.window = Window::Rolling(days);
            assert_eq!(limit.check().unwrap_err().0, "window", "{days}d");
        }
    }

    #[test]
    fn a_limit_is_narrowed_to_models_on_client_scopes_and_to_a_route_on_tokens_and_teams() {
        let only = |model: Option<&str>, route: Option<i64>| LimitOnly {
            model_pattern: model.map(str::to_owned),
            route_id: route,
        };
        assert!(only(None, None).is_plain());
        assert!(!only(Some("a"), None).is_plain());
        assert!(!only(None, Some(1)).is_plain());
        for scope in [
            ScopeKind::Token,
            ScopeKind::Team,
            ScopeKind::Route,
            ScopeKind::Tag,
            ScopeKind::EndUser,
        ] {
            assert_eq!(only(Some("gpt-4*"), None).check(scope), Ok(()));
        }
        for scope in [
            ScopeKind::Token,
            ScopeKind::Team,
            ScopeKind::Tag,
            ScopeKind::EndUser,
        ] {
            assert_eq!(only(Some("a"), Some(3)).check(scope), Ok(()));
        }
        let field = |o: LimitOnly, scope| o.check(scope).unwrap_err().0;
        for scope in [ScopeKind::Channel, ScopeKind::Member] {
            assert_eq!(field(only(Some("a"), None), scope), "model_pattern");
            assert_eq!(field(only(None, Some(1)), scope), "route_id");
        }
        assert_eq!(field(only(None, Some(1)), ScopeKind::Route), "route_id");
        assert_eq!(
            field(only(Some(""), None), ScopeKind::Token),
            "model_pattern"
        );
        assert_eq!(
            field(only(Some("a b"), None), ScopeKind::Team),
            "model_pattern"
        );
        assert_eq!(only(None, None).check(ScopeKind::Member), Ok(()));
        // What applies: the pattern to the client's model, the route by id; both when both.
        assert!(only(None, None).applies(None, None));
        assert!(only(Some("gpt-4*"), None).applies(Some("gpt-4o"), None));
        assert!(!only(Some("gpt-4*"), None).applies(Some("gpt-3"), None));
        assert!(!only(Some("gpt-4*"), None).applies(None, Some(1)));
        assert!(only(None, Some(1)).applies(None, Some(1)));
        assert!(!only(None, Some(1)).applies(Some("x"), Some(2)));
        assert!(!only(None, Some(1)).applies(Some("x"), None));
        assert!(only(Some("a"), Some(1)).applies(Some("a"), Some(1)));
        assert!(!only(Some("a"), Some(1)).applies(Some("b"), Some(1)));
        assert!(!only(Some("a"), Some(1)).applies(Some("a"), Some(2)));
        // A narrowed rule's key names its id; a plain one's does not.
        let limit = Limit::parse("token", 4, "tokens", Some("day"), 9, "hard").unwrap();
        let rule = LimitRule::new(12, limit, only(Some("a"), None));
        assert_eq!(rule.limit.key.rule, Some(12));
        assert_eq!(rule.limit.key.name(), "token:4:tokens:day:r12");
        let plain = LimitRule::new(12, limit, only(None, None));
        assert_eq!(plain.limit.key.rule, None);
        assert_eq!(plain.limit.key.name(), "token:4:tokens:day");
    }

    #[test]
    fn a_concurrent_key_counts_for_ever_whatever_window_it_names() {
        let mut key = LimitKey {
            scope: ScopeKind::Token,
            scope_id: 1,
            metric: Metric::Concurrent,
            window: Window::Minute,
            rule: None,
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
