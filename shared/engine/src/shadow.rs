//! Shadow rules: copy a sample of a model's live traffic to another target (a route member, or a
//! channel and upstream model) after the client's answer is complete, to compare the answers.
//! The client is always served by the live selection; a shadow rule never changes what it gets.

use serde::{Deserialize, Serialize};

use crate::ids::{ChannelId, MemberId, UnixMillis};
use crate::pattern::{validate_pattern, wildcard_match};

/// Where a shadow rule sends its copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShadowTarget {
    /// A route member: its channel and upstream model.
    Member(MemberId),
    /// A channel and an upstream model, not necessarily in any route.
    Channel {
        channel_id: ChannelId,
        upstream_model: String,
    },
}

/// Why a shadow rule stopped by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Its expiry passed.
    Expired,
    /// Its spend cap for the day was reached.
    SpendCap,
    /// The target's error rate passed the rule's threshold over at least its minimum sample.
    ErrorRate,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Expired => "expired",
            StopReason::SpendCap => "spend_cap",
            StopReason::ErrorRate => "error_rate",
        }
    }

    pub fn parse(text: &str) -> Option<StopReason> {
        match text {
            "expired" => Some(StopReason::Expired),
            "spend_cap" => Some(StopReason::SpendCap),
            "error_rate" => Some(StopReason::ErrorRate),
            _ => None,
        }
    }
}

/// Highest accepted `max_rps`.
pub const MAX_SHADOW_RPS: u32 = 100_000;

/// A shadow rule as the proxies apply it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowRule {
    pub id: i64,
    pub name: String,
    /// Matched against the model the client asked for, like a route pattern (`*`/`?`
    /// wildcards); a route's own pattern matches exactly the requests that route serves.
    pub model_pattern: String,
    pub target: ShadowTarget,
    /// Share of the matching requests copied, in hundredths of a percent (1..=10000).
    pub sample_basis_points: u32,
    /// Shadow requests per second, at most, per proxy.
    pub max_rps: u32,
    /// Shadow spend per UTC day (micro-USD); `None`: no cap.
    pub max_daily_spend_micros: Option<u64>,
    /// After this instant no request is shadowed.
    pub expires_at: Option<UnixMillis>,
    /// The rule stops when the target's error rate (failed / sent, per mille) reaches this...
    pub error_rate_stop_per_mille: Option<u32>,
    /// ...over at least this many shadow requests.
    pub error_rate_min_sample: u32,
    pub enabled: bool,
    /// Set when the rule stopped by itself; a stopped rule shadows nothing.
    pub stopped: Option<StopReason>,
}

impl ShadowRule {
    /// Whether the rule copies requests for `model` at `now` (enabled, not stopped, not expired,
    /// the pattern matches).
    pub fn applies(&self, model: &str, now: UnixMillis) -> bool {
        self.enabled
            && self.stopped.is_none()
            && self.expires_at.is_none_or(|at| now < at)
            && (self.model_pattern == model || wildcard_match(&self.model_pattern, model))
    }

    /// Checks the rule's own fields (not whether its target exists): `(field, message)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.name.trim().is_empty() || self.name.chars().count() > 128 {
            return Err(("name", "name must be 1 to 128 characters".to_owned()));
        }
        validate_pattern(&self.model_pattern).map_err(|m| ("model_pattern", m))?;
        if let ShadowTarget::Channel { upstream_model, .. } = &self.target {
            crate::validate::check_upstream_model(upstream_model)
                .map_err(|m| ("upstream_model", m))?;
        }
        if !(1..=10_000).contains(&self.sample_basis_points) {
            return Err((
                "sample_percent",
                "sample_percent must be more than 0 and at most 100, in steps of 0.01".to_owned(),
            ));
        }
        if !(1..=MAX_SHADOW_RPS).contains(&self.max_rps) {
            return Err(("max_rps", format!("max_rps must be 1 to {MAX_SHADOW_RPS}")));
        }
        if let Some(rate) = self.error_rate_stop_per_mille {
            if !(1..=1000).contains(&rate) {
                return Err((
                    "error_rate_stop",
                    "error_rate_stop must be more than 0 and at most 1".to_owned(),
                ));
            }
        }
        if !(1..=1_000_000).contains(&self.error_rate_min_sample) {
            return Err((
                "error_rate_min_sample",
                "error_rate_min_sample must be 1 to 1000000".to_owned(),
            ));
        }
        Ok(())
    }
}

/// Parses a sample percentage (`50`, `12.5`, `0.01`) into basis points: more than 0, at most
/// 100, at most two decimals.
pub fn percent_to_basis_points(percent: f64) -> Option<u32> {
    // A NaN fails both comparisons.
    if !(percent > 0.0 && percent <= 100.0) {
        return None;
    }
    // At most two decimals: the whole number of hundredths divided back gives the very same
    // double (division rounds to the nearest double, as parsing the decimal did).
    let points = (percent * 100.0).round();
    (points / 100.0 == percent).then_some(points as u32)
}

/// Parses an error-rate threshold (a fraction in (0, 1], at most three decimals) into per mille.
pub fn fraction_to_per_mille(fraction: f64) -> Option<u32> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return None;
    }
    let mille = (fraction * 1000.0).round();
    (mille / 1000.0 == fraction).then_some(mille as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> ShadowRule {
        ShadowRule {
            id: 1,
            name: "try".into(),
            model_pattern: "gpt-*".into(),
            target: ShadowTarget::Member(3),
            sample_basis_points: 5000,
            max_rps: 10,
            max_daily_spend_micros: None,
            expires_at: Some(1000),
            error_rate_stop_per_mille: Some(500),
            error_rate_min_sample: 20,
            enabled: true,
            stopped: None,
        }
    }

    #[test]
    fn a_rule_applies_to_matching_models_until_it_expires_or_stops() {
        let r = rule();
        assert!(r.applies("gpt-4o", 999));
        assert!(!r.applies("gpt-4o", 1000));
        assert!(!r.applies("claude", 0));
        let stopped = ShadowRule {
            stopped: Some(StopReason::ErrorRate),
            ..rule()
        };
        assert!(!stopped.applies("gpt-4o", 0));
    }

    #[test]
    fn stop_reasons_read_back_as_written() {
        for reason in [
            StopReason::Expired,
            StopReason::SpendCap,
            StopReason::ErrorRate,
        ] {
            assert_eq!(StopReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(StopReason::Expired.as_str(), "expired");
        assert_eq!(StopReason::SpendCap.as_str(), "spend_cap");
        assert_eq!(StopReason::ErrorRate.as_str(), "error_rate");
        assert_eq!(StopReason::parse("disabled"), None);
        assert_eq!(StopReason::parse(""), None);
    }

    #[test]
    fn a_name_is_1_to_128_characters_and_not_blank() {
        let named = |name: &str| ShadowRule {
            name: name.to_owned(),
            ..rule()
        };
        assert!(
            named(&"é".repeat(128)).check().is_ok(),
            "counted in characters"
        );
        assert!(named("x").check().is_ok());
        for bad in ["", "   ", &"x".repeat(129)] {
            assert_eq!(
                named(bad).check().map_err(|(f, _)| f),
                Err("name"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_snapshot_keeps_its_shadow_rules_in_id_order() {
        let numbered = |id| ShadowRule { id, ..rule() };
        let snapshot = crate::Snapshot::new(crate::SnapshotParts {
            shadows: vec![numbered(7), numbered(2)],
            ..crate::SnapshotParts::default()
        });
        let ids: Vec<i64> = snapshot.shadows().iter().map(|r| r.id).collect();
        assert_eq!(ids, [2, 7]);
    }

    #[test]
    fn percentages_and_fractions_parse_exactly() {
        assert_eq!(percent_to_basis_points(50.0), Some(5000));
        assert_eq!(percent_to_basis_points(0.01), Some(1));
        assert_eq!(percent_to_basis_points(100.0), Some(10_000));
        assert_eq!(percent_to_basis_points(0.0), None);
        assert_eq!(percent_to_basis_points(100.5), None);
        assert_eq!(percent_to_basis_points(0.001), None);
        assert_eq!(percent_to_basis_points(12.34), Some(1234));
        for bad in [
            12.345,
            -5.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-9,
        ] {
            assert_eq!(percent_to_basis_points(bad), None, "{bad}");
        }
        assert_eq!(fraction_to_per_mille(0.5), Some(500));
        assert_eq!(fraction_to_per_mille(0.123), Some(123));
        assert_eq!(fraction_to_per_mille(0.001), Some(1));
        assert_eq!(fraction_to_per_mille(1.0), Some(1000));
        for bad in [1.5, 0.0, 0.0005, 0.1234, -0.5, f64::NAN, f64::INFINITY] {
            assert_eq!(fraction_to_per_mille(bad), None, "{bad}");
        }
        assert!(rule().check().is_ok());
        let bad = ShadowRule {
            sample_basis_points: 0,
            ..rule()
        };
        assert_eq!(bad.check().map_err(|(f, _)| f), Err("sample_percent"));
    }
}
