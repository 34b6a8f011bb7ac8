//! The response cache rules: the names of endpoints and scopes, which rule covers a request,
//! the limits of a rule's fields (at and beyond them), and the endpoint list's parsing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use switchyard_engine::cache::{
    applicable, parse_endpoints, CacheEndpoint, CacheRule, CacheScope, MAX_CACHE_ENTRY_BYTES,
    MAX_CACHE_TTL_SECONDS,
};

fn rule(id: i64, pattern: &str, endpoints: &[CacheEndpoint]) -> CacheRule {
    CacheRule {
        id,
        name: format!("r{id}"),
        model_pattern: pattern.to_owned(),
        endpoints: endpoints.to_vec(),
        ttl_seconds: 60,
        max_entry_bytes: 1 << 20,
        scope: CacheScope::Team,
        deterministic_only: false,
        enabled: true,
        semantic: None,
        team: None,
    }
}

#[test]
fn every_endpoint_and_scope_name_is_its_serde_name_and_parses_back() {
    let endpoints = [
        (CacheEndpoint::ChatCompletions, "chat_completions"),
        (CacheEndpoint::Completions, "completions"),
        (CacheEndpoint::Embeddings, "embeddings"),
        (CacheEndpoint::Messages, "messages"),
        (CacheEndpoint::GenerateContent, "generate_content"),
        (CacheEndpoint::Responses, "responses"),
    ];
    assert_eq!(CacheEndpoint::ALL.len(), endpoints.len());
    for (endpoint, name) in endpoints {
        assert_eq!(endpoint.as_str(), name);
        assert_eq!(serde_json::to_value(endpoint).unwrap(), name);
        assert_eq!(CacheEndpoint::parse(name), Some(endpoint));
        assert_eq!(CacheEndpoint::parse(&format!(" {name}\n")), Some(endpoint));
    }
    let scopes = [
        (CacheScope::Route, "route"),
        (CacheScope::Team, "team"),
        (CacheScope::Token, "token"),
    ];
    for (scope, name) in scopes {
        assert_eq!(scope.as_str(), name);
        assert_eq!(serde_json::to_value(scope).unwrap(), name);
        assert_eq!(CacheScope::parse(name), Some(scope));
        assert_eq!(CacheScope::parse(&format!(" {name}\t")), Some(scope));
    }
    for unknown in ["", "chat", "Route", "TEAM", "tokens", "images"] {
        assert_eq!(CacheScope::parse(unknown), None, "{unknown:?}");
        assert_eq!(CacheEndpoint::parse(unknown), None, "{unknown:?}");
    }
    assert_eq!(CacheScope::default(), CacheScope::Team);
}

#[test]
fn a_rule_covers_a_request_by_route_pattern_exact_model_or_wildcard_and_endpoint() {
    let chat = CacheEndpoint::ChatCompletions;
    // (rule pattern, route pattern, model, covered)
    let cases = [
        ("gpt-4o", "gpt-4o", "gpt-4o", true),
        ("team-*", "team-*", "other", true),
        ("gpt-4o", "gpt-*", "gpt-4o", true),
        ("gpt-*", "claude", "gpt-4o-mini", true),
        ("gpt-?o", "x", "gpt-4o", true),
        ("gpt-4o", "gpt-*", "gpt-4o-mini", false),
        ("gpt-4o", "x", "gpt-4", false),
        ("claude-*", "gpt-*", "gpt-4o", false),
        ("gpt-?o", "x", "gpt-40o", false),
    ];
    for (pattern, route, model, covered) in cases {
        let r = rule(1, pattern, &[chat]);
        assert_eq!(
            r.covers(route, model, chat, None),
            covered,
            "rule {pattern:?}, route {route:?}, model {model:?}"
        );
        // Another endpoint is never covered, whatever the model.
        assert!(!r.covers(route, model, CacheEndpoint::Embeddings, None));
        let off = CacheRule {
            enabled: false,
            ..r
        };
        assert!(!off.covers(route, model, chat, None));
    }
}

#[test]
fn the_first_rule_in_order_that_covers_the_request_applies() {
    let chat = CacheEndpoint::ChatCompletions;
    let mut disabled = rule(1, "*", &[chat]);
    disabled.enabled = false;
    let rules = [
        disabled,
        rule(2, "gpt-*", &[CacheEndpoint::Embeddings]),
        rule(3, "claude-*", &[chat]),
        rule(4, "gpt-*", &[chat, CacheEndpoint::Embeddings]),
        rule(5, "*", &[chat]),
    ];
    let id =
        |model: &str, endpoint| applicable(&rules, "route", model, endpoint, None).map(|r| r.id);
    assert_eq!(id("gpt-4o", chat), Some(4));
    assert_eq!(id("gpt-4o", CacheEndpoint::Embeddings), Some(2));
    assert_eq!(id("claude-3", chat), Some(3));
    assert_eq!(id("llama", chat), Some(5));
    assert_eq!(id("llama", CacheEndpoint::Messages), None);
    assert_eq!(applicable(&[], "route", "gpt-4o", chat, None), None);
}

#[test]
fn a_rules_fields_are_checked_at_their_limits() {
    assert_eq!(MAX_CACHE_TTL_SECONDS, 2_592_000, "30 days");
    assert_eq!(MAX_CACHE_ENTRY_BYTES, 8 * 1024 * 1024, "8 MiB");
    let base = rule(1, "gpt-*", &[CacheEndpoint::Messages]);
    // (what changes, the field named, or None when the rule is valid)
    let cases: Vec<(CacheRule, Option<&str>)> = vec![
        (base.clone(), None),
        (
            CacheRule {
                name: "a".repeat(128),
                ..base.clone()
            },
            None,
        ),
        // 128 characters of two bytes each: the limit counts characters.
        (
            CacheRule {
                name: "é".repeat(128),
                ..base.clone()
            },
            None,
        ),
        (
            CacheRule {
                name: "a".repeat(129),
                ..base.clone()
            },
            Some("name"),
        ),
        (
            CacheRule {
                name: String::new(),
                ..base.clone()
            },
            Some("name"),
        ),
        (
            CacheRule {
                name: " \t".into(),
                ..base.clone()
            },
            Some("name"),
        ),
        (
            CacheRule {
                model_pattern: String::new(),
                ..base.clone()
            },
            Some("model_pattern"),
        ),
        (
            CacheRule {
                model_pattern: "a**".into(),
                ..base.clone()
            },
            Some("model_pattern"),
        ),
        (
            CacheRule {
                endpoints: vec![],
                ..base.clone()
            },
            Some("endpoints"),
        ),
        (
            CacheRule {
                ttl_seconds: 0,
                ..base.clone()
            },
            Some("ttl_seconds"),
        ),
        (
            CacheRule {
                ttl_seconds: 1,
                ..base.clone()
            },
            None,
        ),
        (
            CacheRule {
                ttl_seconds: MAX_CACHE_TTL_SECONDS,
                ..base.clone()
            },
            None,
        ),
        (
            CacheRule {
                ttl_seconds: MAX_CACHE_TTL_SECONDS + 1,
                ..base.clone()
            },
            Some("ttl_seconds"),
        ),
        (
            CacheRule {
                max_entry_bytes: 0,
                ..base.clone()
            },
            Some("max_entry_bytes"),
        ),
        (
            CacheRule {
                max_entry_bytes: 1,
                ..base.clone()
            },
            None,
        ),
        (
            CacheRule {
                max_entry_bytes: MAX_CACHE_ENTRY_BYTES,
                ..base.clone()
            },
            None,
        ),
        (
            CacheRule {
                max_entry_bytes: MAX_CACHE_ENTRY_BYTES + 1,
                ..base.clone()
            },
            Some("max_entry_bytes"),
        ),
    ];
    for (r, field) in cases {
        let got = r.check();
        assert_eq!(got.as_ref().err().map(|e| e.0), field, "{r:?}: {got:?}");
        if let Err((_, message)) = got {
            assert!(!message.is_empty());
        }
    }
}

#[test]
fn endpoint_names_parse_in_order_without_repeats_and_an_unknown_one_is_named() {
    assert_eq!(
        parse_endpoints(&[
            "messages",
            " embeddings ",
            "messages",
            "responses",
            "embeddings"
        ]),
        Ok(vec![
            CacheEndpoint::Messages,
            CacheEndpoint::Embeddings,
            CacheEndpoint::Responses
        ])
    );
    assert_eq!(parse_endpoints::<&str>(&[]), Ok(vec![]));
    let err = parse_endpoints(&["chat_completions", "images", "nope"]).unwrap_err();
    assert!(err.contains("\"images\""), "{err}");
    assert!(!err.contains("nope"), "{err}");
    for endpoint in CacheEndpoint::ALL {
        assert!(err.contains(endpoint.as_str()), "{err}");
    }
}

/// A snapshot keeps the cache rules it was built from, in id order whatever order they were
/// listed in, and gives them back with its parts (the disk cache and explain read them there).
#[test]
fn a_snapshot_holds_its_cache_rules_in_id_order_and_gives_them_back() {
    use switchyard_engine::{Snapshot, SnapshotParts};
    let all = [CacheEndpoint::ChatCompletions];
    let snapshot = Snapshot::new(SnapshotParts {
        cache_rules: vec![rule(7, "b-*", &all), rule(3, "a", &all)],
        ..SnapshotParts::default()
    });
    let ids = |rules: &[CacheRule]| rules.iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(snapshot.cache_rules()), [3, 7]);
    assert_eq!(ids(&snapshot.to_parts().cache_rules), [3, 7]);
    assert_eq!(ids(&snapshot.into_parts().cache_rules), [3, 7]);
}
