//! Global settings (docs/src/reference/settings.md) with their defaults and ranges. Route-level
//! overrides live on [`crate::Route`]; the engine resolves them in one place ([`crate::select`]).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    // retry
    pub retry_times: u32,
    pub channel_retry_times: u32,
    pub cross_channel_failover_enabled: bool,
    pub request_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub first_byte_timeout_ms: u64,
    pub stream_idle_timeout_ms: u64,
    // strategy
    pub latency_aware_enabled: bool,
    pub error_aware_enabled: bool,
    pub concurrency_aware_enabled: bool,
    // stickiness
    pub sticky_enabled: bool,
    pub sticky_ttl_minutes: u32,
    // canary
    pub stable_first_enabled: bool,
    pub stable_first_denominator: u32,
    pub stable_first_promote_requests: u32,
    // protection
    pub fault_protection_enabled: bool,
    pub cooldown_seconds: u32,
    pub breaker_failure_threshold: u32,
    pub recovery_probe_enabled: bool,
    pub recovery_probe_interval_seconds: u32,
    /// Length of a recovering channel's slow-start ramp; 0 = no ramp (full weight at once).
    pub slow_start_seconds: u32,
    /// Share of its weight a channel gets the moment it starts recovering, in percent.
    pub slow_start_initial_percent: u32,
    // limits
    pub max_request_body_bytes: u64,
    // protocols
    /// The gateway keeps no responses: a Responses API request translated for another
    /// protocol's member is answered with `store: false`. When this is on, a request that asks
    /// for its response to be stored (`store` true, or absent: the API's default) is refused by
    /// such members instead (`protocol_unsupported`), so only members that speak the Responses
    /// API themselves serve it.
    pub responses_refuse_store: bool,
    // accounting
    /// Usage the operator's prices do not cover is priced from the built-in catalog of the
    /// providers' published prices, for channels whose preset (or provider and default base
    /// URL) the catalog knows. Off: such usage stays unpriced.
    pub price_catalog: bool,
    /// What a batch's usage (OpenAI's Batch API, Anthropic's message batches) is charged, in
    /// percent of the channel's price: the providers bill batch traffic at a discount (both at
    /// 50 % today). 100: the ordinary price.
    pub batch_price_percent: u32,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            retry_times: 2,
            channel_retry_times: 1,
            cross_channel_failover_enabled: true,
            request_timeout_ms: 300_000,
            connect_timeout_ms: 5_000,
            first_byte_timeout_ms: 30_000,
            stream_idle_timeout_ms: 120_000,
            latency_aware_enabled: false,
            error_aware_enabled: false,
            concurrency_aware_enabled: true,
            sticky_enabled: false,
            sticky_ttl_minutes: 30,
            stable_first_enabled: false,
            stable_first_denominator: 25,
            stable_first_promote_requests: 100,
            fault_protection_enabled: true,
            cooldown_seconds: 30,
            breaker_failure_threshold: 5,
            recovery_probe_enabled: true,
            recovery_probe_interval_seconds: 600,
            slow_start_seconds: 60,
            slow_start_initial_percent: 10,
            max_request_body_bytes: 33_554_432,
            responses_refuse_store: false,
            price_catalog: true,
            batch_price_percent: 100,
        }
    }
}

/// One setting that is out of its range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: &'static str,
    pub message: String,
}

/// Inclusive ranges of the numeric settings. One table, used by validation and by docs.
pub const RANGES: &[(&str, u64, u64)] = &[
    ("retry_times", 0, 100),
    ("channel_retry_times", 0, 5),
    ("request_timeout_ms", 1_000, 3_600_000),
    ("connect_timeout_ms", 100, 600_000),
    ("first_byte_timeout_ms", 100, 3_600_000),
    ("stream_idle_timeout_ms", 100, 3_600_000),
    ("sticky_ttl_minutes", 1, 1_440),
    ("stable_first_denominator", 2, 1_000),
    ("stable_first_promote_requests", 1, 1_000_000),
    ("cooldown_seconds", 0, 86_400),
    ("breaker_failure_threshold", 0, 1_000),
    ("recovery_probe_interval_seconds", 0, 86_400),
    ("slow_start_seconds", 0, 86_400),
    ("slow_start_initial_percent", 1, 100),
    ("max_request_body_bytes", 1_024, 1_073_741_824),
    ("batch_price_percent", 1, 100),
];

/// The range of a route-level override, which shares its global setting's range.
pub fn range_of(field: &str) -> Option<(u64, u64)> {
    RANGES
        .iter()
        .find(|(name, _, _)| *name == field)
        .map(|(_, lo, hi)| (*lo, *hi))
}

/// Checks `value` against the range of `field`; `None` when in range (or the field has none).
pub fn check_range(field: &'static str, value: u64) -> Option<FieldError> {
    let (lo, hi) = range_of(field)?;
    if (lo..=hi).contains(&value) {
        None
    } else {
        Some(FieldError {
            field,
            message: format!("{field} must be between {lo} and {hi}, got {value}"),
        })
    }
}

impl Settings {
    /// Every out-of-range field, in declaration order. Empty when valid.
    pub fn validate(&self) -> Vec<FieldError> {
        let values: [(&'static str, u64); 16] = [
            ("retry_times", self.retry_times.into()),
            ("channel_retry_times", self.channel_retry_times.into()),
            ("request_timeout_ms", self.request_timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("first_byte_timeout_ms", self.first_byte_timeout_ms),
            ("stream_idle_timeout_ms", self.stream_idle_timeout_ms),
            ("sticky_ttl_minutes", self.sticky_ttl_minutes.into()),
            (
                "stable_first_denominator",
                self.stable_first_denominator.into(),
            ),
            (
                "stable_first_promote_requests",
                self.stable_first_promote_requests.into(),
            ),
            ("cooldown_seconds", self.cooldown_seconds.into()),
            (
                "breaker_failure_threshold",
                self.breaker_failure_threshold.into(),
            ),
            (
                "recovery_probe_interval_seconds",
                self.recovery_probe_interval_seconds.into(),
            ),
            ("slow_start_seconds", self.slow_start_seconds.into()),
            (
                "slow_start_initial_percent",
                self.slow_start_initial_percent.into(),
            ),
            ("max_request_body_bytes", self.max_request_body_bytes),
            ("batch_price_percent", self.batch_price_percent.into()),
        ];
        values
            .into_iter()
            .filter_map(|(field, value)| check_range(field, value))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec_and_are_valid() {
        let s = Settings::default();
        assert_eq!(s.retry_times, 2);
        assert_eq!(s.channel_retry_times, 1);
        assert!(s.cross_channel_failover_enabled);
        assert_eq!(s.request_timeout_ms, 300_000);
        assert_eq!(
            (
                s.connect_timeout_ms,
                s.first_byte_timeout_ms,
                s.stream_idle_timeout_ms
            ),
            (5_000, 30_000, 120_000)
        );
        assert!(!s.latency_aware_enabled && !s.error_aware_enabled && s.concurrency_aware_enabled);
        assert!(!s.sticky_enabled);
        assert_eq!(s.sticky_ttl_minutes, 30);
        assert!(!s.stable_first_enabled);
        assert_eq!(s.stable_first_denominator, 25);
        assert_eq!(s.stable_first_promote_requests, 100);
        assert!(s.fault_protection_enabled && s.recovery_probe_enabled);
        assert_eq!(s.cooldown_seconds, 30);
        assert_eq!(s.breaker_failure_threshold, 5);
        assert_eq!(s.recovery_probe_interval_seconds, 600);
        assert_eq!(
            (s.slow_start_seconds, s.slow_start_initial_percent),
            (60, 10)
        );
        assert_eq!(s.max_request_body_bytes, 33_554_432);
        assert!(s.validate().is_empty());
    }

    #[test]
    fn out_of_range_settings_name_the_field() {
        let s = Settings {
            retry_times: 101,
            channel_retry_times: 6,
            sticky_ttl_minutes: 0,
            ..Settings::default()
        };
        let fields: Vec<_> = s.validate().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            ["retry_times", "channel_retry_times", "sticky_ttl_minutes"]
        );
    }

    #[test]
    fn slow_start_ranges_are_checked() {
        let s = Settings {
            slow_start_seconds: 86_401,
            slow_start_initial_percent: 0,
            ..Settings::default()
        };
        let fields: Vec<_> = s.validate().into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["slow_start_seconds", "slow_start_initial_percent"]);
        let s = Settings {
            slow_start_initial_percent: 101,
            ..Settings::default()
        };
        assert_eq!(s.validate().len(), 1);
    }

    #[test]
    fn every_range_admits_its_bounds_and_refuses_one_beyond() {
        for &(field, lo, hi) in RANGES {
            let refused = |value: u64| -> Vec<&'static str> {
                let s: Settings = serde_json::from_value(serde_json::json!({ field: value }))
                    .unwrap_or_else(|e| panic!("{field} {value}: {e}"));
                s.validate().into_iter().map(|e| e.field).collect()
            };
            for value in [lo, lo + 1, hi - 1, hi] {
                assert!(refused(value).is_empty(), "{field} {value}");
            }
            assert_eq!(refused(hi + 1), [field], "{field} one above its range");
            if lo > 0 {
                assert_eq!(refused(lo - 1), [field], "{field} one below its range");
            }
        }
    }

    #[test]
    fn unknown_setting_is_rejected_when_deserialising() {
        let err = serde_json::from_str::<Settings>(r#"{"retry_timez": 3}"#).unwrap_err();
        assert!(err.to_string().contains("retry_timez"), "{err}");
    }
}
