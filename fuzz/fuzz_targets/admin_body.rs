//! The control plane's admin JSON bodies: every create body (raw serde struct → validated spec),
//! every patch body (parsed), and the settings document, through
//! `switchyard_control_plane::api::validate_body`.
//!
//! Invariants: a refused body is a 400 or a 422, never a 500; an accepted spec keeps the rules
//! its handler promises (trimmed names of 1 to 128 characters, valid patterns, sorted unique
//! team lists, non-negative weights, settings within their ranges), and the audit detail of a
//! credential never carries its secret.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use switchyard_control_plane::api::{validate_body, BodyKind};
use switchyard_control_plane::error::ApiError;
use switchyard_engine::limit::{parse_rfc3339, parse_usd_micros, Limit};
use switchyard_engine::{validate_pattern, Settings};

fn name_ok(v: &Value, key: &str) {
    let name = v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing: {v}"));
    let chars = name.chars().count();
    assert!(
        name.trim() == name && (1..=128).contains(&chars),
        "{key} {name:?}"
    );
}

fn check(kind: BodyKind, spec: &Value, input: &Value) {
    match kind {
        BodyKind::ChannelCreate | BodyKind::TeamCreate | BodyKind::TokenCreate => {
            name_ok(spec, "name")
        }
        _ => {}
    }
    match kind {
        BodyKind::RouteCreate => {
            let pattern = spec["model_pattern"].as_str().unwrap_or_default();
            assert!(validate_pattern(pattern).is_ok(), "{pattern:?}");
        }
        BodyKind::MemberCreate => {
            let model = spec["upstream_model"].as_str().unwrap_or_default();
            assert!(model.trim() == model && !model.is_empty(), "{model:?}");
            let group = spec["group_name"].as_str().unwrap_or_default();
            assert!(group.trim() == group && !group.is_empty(), "{group:?}");
            assert!(spec["weight"].as_i64().is_some_and(|w| w >= 0), "{spec}");
        }
        BodyKind::TeamCreate => {
            let models: Vec<&str> = spec["models"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            assert!(models.windows(2).all(|w| w[0] < w[1]), "{models:?}");
            assert!(models.iter().all(|m| validate_pattern(m).is_ok()));
            let members: Vec<i64> = spec["members"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            assert!(members.windows(2).all(|w| w[0] < w[1]), "{members:?}");
        }
        BodyKind::TokenCreate => {
            if let Some(group) = spec["route_group_name"].as_str() {
                assert!(group.trim() == group && !group.is_empty(), "{group:?}");
            }
            if let Some(at) = spec["expires_at"].as_str() {
                assert!(parse_rfc3339(at).is_some(), "{at:?}");
            }
        }
        BodyKind::PriceCreate => {
            let pattern = spec["model_pattern"].as_str().unwrap_or_default();
            assert!(validate_pattern(pattern).is_ok(), "{pattern:?}");
            for key in ["input_per_million", "output_per_million"] {
                let usd = spec[key].as_str().unwrap_or_default();
                assert!(parse_usd_micros(usd).is_ok(), "{key} {usd:?}");
            }
        }
        BodyKind::LimitCreate => {
            // The audit detail reads back as the limit it records (spend in USD text).
            let value = match &spec["value"] {
                Value::String(usd) => parse_usd_micros(usd).expect("a spend value in USD"),
                other => other.as_u64().expect("a whole value"),
            };
            let text = |key: &str| spec[key].as_str().unwrap_or_default().to_owned();
            let limit = Limit::parse(
                &text("scope"),
                spec["scope_id"].as_i64().unwrap_or_default(),
                &text("metric"),
                Some(text("window").as_str()),
                value,
                &text("mode"),
            );
            assert!(limit.is_ok(), "{spec}: {limit:?}");
        }
        BodyKind::CredentialCreate => {
            assert!(spec.get("secret").is_none(), "{spec}");
            if let Some(secret) = input["secret"].as_str() {
                let secret = Value::String(secret.trim().to_owned());
                let leaked = spec
                    .as_object()
                    .is_some_and(|o| o.values().any(|v| *v == secret));
                assert!(!leaked, "the secret is in the audit detail");
            }
        }
        BodyKind::Settings => {
            let settings: Settings = serde_json::from_value(spec.clone()).expect("settings");
            assert!(settings.validate().is_empty(), "{spec}");
        }
        _ => assert!(spec.is_null() || kind == BodyKind::ChannelCreate),
    }
}

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    let input: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
    for kind in BodyKind::ALL {
        match validate_body(kind, &body) {
            Ok(spec) => check(kind, &spec, &input),
            Err(ApiError::BadRequest { .. } | ApiError::Validation { .. }) => {}
            Err(other) => panic!("{kind:?}: a body gave {other:?}"),
        }
    }
});
