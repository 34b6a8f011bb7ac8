//! The admin API's OpenAPI document is valid OpenAPI 3.1 and fully typed: unique operation ids,
//! no free-form bodies, enums as enums, `date-time` formats, 401/503 and a role on every operation
//! (403 where the role is above viewer). Checked structurally here, by a real validator
//! (`openapi-spec-validator`, which `scripts/test` installs into the venv
//! `SWITCHYARD_TEST_PYTHON` names), and against real responses: explain, state and settings
//! bodies parse into the documented types with unknown fields refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::api::schema::{ExplainResponse, SharedStateResponse};
use switchyard_control_plane::live::LiveState;

use common::{test_app, test_app_with_live, TestApp};

fn document() -> Value {
    serde_json::to_value(switchyard_control_plane::api::openapi()).unwrap()
}

const METHODS: [&str; 5] = ["get", "put", "post", "patch", "delete"];

fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                out.push((path.clone(), method.to_owned(), op.clone()));
            }
        }
    }
    out
}

#[test]
fn operation_ids_are_unique_and_every_operation_documents_401_and_503() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut seen: HashMap<String, String> = HashMap::new();
    for (path, method, op) in operations(&doc) {
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no operationId"))
            .to_owned();
        if let Some(other) = seen.insert(id.clone(), format!("{method} {path}")) {
            panic!("operationId {id} is used by {other} and {method} {path}");
        }
        for code in ["401", "503"] {
            assert!(
                op["responses"].get(code).is_some(),
                "{method} {path} does not document {code}"
            );
        }
        // Every operation states its role; those above viewer document the 403 a lower role gets.
        let role = op["x-switchyard-role"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no x-switchyard-role"));
        assert!(
            ["viewer", "operator", "admin"].contains(&role),
            "{method} {path}: {role}"
        );
        // And what an admin limited to one team may do with it; a fleet-only one documents the
        // 403 such an admin gets.
        let team = op["x-switchyard-team"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no x-switchyard-team"));
        assert!(
            ["open", "own", "filtered", "fleet"].contains(&team),
            "{method} {path}: {team}"
        );
        assert_eq!(
            op["responses"].get("403").is_some(),
            role != "viewer" || team == "fleet",
            "{method} {path} ({role}, {team}) and its 403"
        );
        for (code, response) in op["responses"].as_object().unwrap() {
            if code.starts_with('4') || code.starts_with('5') {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {code}"
                );
            }
        }
    }
    assert!(seen.contains_key("list_channels") && seen.contains_key("get_usage"));
}

/// Every schema node: no `{}` (anything goes), no object without properties (except the audit
/// entry's `detail`, whose keys depend on the resource), timestamps as `date-time`, and the
/// string fields that take a fixed set of values as enums.
#[test]
fn bodies_are_typed_timestamps_are_date_times_and_enums_are_enums() {
    let doc = document();
    let mut problems = Vec::new();
    fn walk(node: &Value, path: &str, problems: &mut Vec<String>) {
        match node {
            Value::Object(map) => {
                if map.is_empty() {
                    problems.push(format!("{path}: free-form schema {{}}"));
                }
                let types: Vec<&str> = match map.get("type") {
                    Some(Value::String(t)) => vec![t.as_str()],
                    Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                let field = path.rsplit('/').next().unwrap_or("");
                // A guardrail's JSON schema is a JSON Schema document (the guide lists the
                // keywords it may use).
                let audit_detail = (path.contains("AuditEntry")
                    && path.ends_with("/properties/detail"))
                    || path.ends_with("GuardJsonSchemaDoc/properties/schema");
                if types.contains(&"object")
                    && !map.contains_key("properties")
                    && !map.contains_key("additionalProperties")
                    && !audit_detail
                {
                    problems.push(format!("{path}: object without properties"));
                }
                if types.contains(&"string")
                    && (field == "at" || field.ends_with("_at") || field == "from" || field == "to")
                    && map.get("format") != Some(&json!("date-time"))
                {
                    problems.push(format!("{path}: timestamp without format date-time"));
                }
                for (key, value) in map {
                    walk(value, &format!("{path}/{key}"), problems);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), problems);
                }
            }
            _ => {}
        }
    }
    walk(&doc, "", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");

    let schemas = &doc["components"]["schemas"];
    let enum_of = |name: &str| -> BTreeSet<String> {
        schemas[name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} is not an enum: {}", schemas[name]))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let set = |values: &[&str]| {
        values
            .iter()
            .map(|v| (*v).to_owned())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        enum_of("ProviderName"),
        set(&[
            "openai",
            "azure",
            "anthropic",
            "gemini",
            "vertex",
            "bedrock",
            "mock"
        ])
    );
    assert_eq!(
        enum_of("ChannelStatusName"),
        set(&["enabled", "disabled", "auto_disabled"])
    );
    assert_eq!(
        enum_of("RoutingModeName"),
        set(&["auto", "weighted", "latency", "adaptive", "single"])
    );
    assert_eq!(
        enum_of("UsageDimension"),
        set(&["token", "team", "route", "channel", "model", "tag", "end_user"])
    );
    for (schema, field, target) in [
        ("ChannelView", "provider", "ProviderName"),
        ("ChannelView", "status", "ChannelStatusName"),
        ("ChannelEvent", "to_status", "ChannelStatusName"),
        ("CredentialView", "source", "CredentialSource"),
        ("RouteView", "routing_mode", "RoutingModeName"),
        ("CandidateView", "reasons", "ReasonCode"),
    ] {
        let text = schemas[schema]["properties"][field].to_string();
        assert!(
            text.contains(&format!("#/components/schemas/{target}")),
            "{schema}.{field} is not a {target}: {text}"
        );
    }
    // The settings schema is generated from the engine's settings: every key, typed, bounded.
    let settings = &schemas["Settings"];
    assert_eq!(settings["additionalProperties"], false);
    let defaults = serde_json::to_value(switchyard_engine::Settings::default()).unwrap();
    for (key, default) in defaults.as_object().unwrap() {
        let property = &settings["properties"][key];
        assert_eq!(&property["default"], default, "{key}");
        let want = if default.is_boolean() {
            "boolean"
        } else {
            "integer"
        };
        assert_eq!(property["type"], want, "{key}");
    }
}

/// A cost that may be unknown (every request unpriced) is documented as nullable wherever the
/// API answers `null` for it: never a plain string that would promise `"0"`.
#[test]
fn costs_that_can_be_unknown_are_nullable() {
    let doc = document();
    let nullable = |schema: &str, field: &str| {
        let property = &doc["components"]["schemas"][schema]["properties"][field];
        let types = property["type"].as_array().cloned().unwrap_or_default();
        let in_one_of = property["oneOf"]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["type"] == "null"));
        assert!(
            types.contains(&json!("null")) || in_one_of,
            "{schema}.{field} is not nullable: {property}"
        );
    };
    nullable("UsageTotals", "cost_usd");
    nullable("UsageGroup", "cost_usd");
    nullable("SideReport", "cost_usd");
    nullable("SideReport", "cost_per_1000_usd");
    nullable("BudgetView", "spent_usd");
}

#[test]
fn the_document_passes_a_real_openapi_validator() {
    let python = std::env::var("SWITCHYARD_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("SWITCHYARD_TEST_PYTHON is not set: it must name a python with `openapi-spec-validator` (scripts/test sets it up)")
    });
    let dir = std::env::temp_dir().join(format!("switchyard-openapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&document()).unwrap()).unwrap();
    let output = Command::new(&python)
        .args(["-m", "openapi_spec_validator"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run SWITCHYARD_TEST_PYTHON: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "openapi-spec-validator: {text}");
    assert!(text.contains("OK"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_served_document_is_the_checked_one(pool: PgPool) {
    let app = test_app(pool);
    let served = app.get("/api/v1/openapi.json").await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body, document());
}

async fn live_channel(app: &TestApp, name: &str) -> i64 {
    let id = app.channel(name).await;
    app.create(
        &format!("/api/v1/channels/{id}/credentials"),
        json!({"secret": "sk-test-0123456789abcdef"}),
    )
    .await;
    id
}

/// Parses a real body into its documented type, refusing unknown fields.
fn parses_as<T: serde::de::DeserializeOwned>(body: &Value) -> T {
    serde_json::from_value(body.clone())
        .unwrap_or_else(|e| panic!("the body does not match its schema: {e}\n{body}"))
}

#[sqlx::test(migrations = "../migrations")]
async fn explain_settings_and_state_bodies_match_their_schemas(pool: PgPool) {
    let app = test_app(pool);
    let a = live_channel(&app, "a").await;
    let b = app.channel("no-credential").await;
    let route = app.route("gpt-*").await;
    app.member(
        route,
        json!({"channel_id": a, "upstream_model": "m1", "priority": 1}),
    )
    .await;
    app.member(
        route,
        json!({"channel_id": b, "upstream_model": "m2", "canary": true}),
    )
    .await;
    let sticky = app.route("sticky-*").await;
    app.patch(
        &format!("/api/v1/routes/{sticky}"),
        json!({"sticky_session": true}),
    )
    .await;
    app.member(sticky, json!({"channel_id": b, "upstream_model": "m3"}))
        .await;
    app.refresh().await;

    for query in [
        "model=gpt-4o&seed=1",
        "model=gpt-4o&session=s1&route_group=default",
        "model=sticky-1&session=s2",
    ] {
        let reply = app.get(&format!("/api/v1/routes/explain?{query}")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let parsed: ExplainResponse = parses_as(&reply.body);
        assert!(!parsed.candidates.is_empty());
    }

    let settings = app.get("/api/v1/settings").await;
    let keys: BTreeSet<_> = settings.body.as_object().unwrap().keys().cloned().collect();
    let doc = document();
    let documented: BTreeSet<_> = doc["components"]["schemas"]["Settings"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, documented);

    let state = app.get("/api/v1/state").await;
    assert_eq!(state.status, 200);
    let parsed: SharedStateResponse = parses_as(&state.body);
    assert!(!parsed.configured);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_state_body_with_redis_matches_its_schema(pool: PgPool) {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = format!("openapi-{}", std::process::id());
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    assert!(live.wait_synced(std::time::Duration::from_secs(10)).await);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // Something in every list the dump has.
    let store = live.store();
    store.trip_breaker(7, "test", now);
    store.extend_cooldown(3, now + 60_000);
    store.disable_credential(5, "quota", now);
    store.in_flight_acquire(7);
    let app = test_app_with_live(pool, live.clone());
    let state = app.get("/api/v1/state").await;
    assert_eq!(state.status, 200, "{}", state.text);
    let parsed: SharedStateResponse = parses_as(&state.body);
    assert!(parsed.configured);
    assert_eq!(parsed.breakers.len(), 1, "{}", state.body);
    assert_eq!(parsed.cooldowns.len(), 1);
    store.in_flight_release(7);
    live.close(std::time::Duration::from_secs(2)).await;
}

/// A Python client generated from the document (`openapi-python-client`, installed by
/// `scripts/test` beside the validator) imports whole — every API and model module — and its
/// models read real answers: a channel, a route page and the settings.
#[sqlx::test(migrations = "../migrations")]
async fn a_client_generated_from_the_document_imports_and_reads_real_answers(pool: PgPool) {
    let python = std::env::var("SWITCHYARD_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("SWITCHYARD_TEST_PYTHON is not set: it must name a python with `openapi-python-client` (scripts/test sets it up)")
    });
    let app = test_app(pool);
    let channel_id = app.channel("generated").await;
    let channel = app
        .get(&format!("/api/v1/channels/{channel_id}"))
        .await
        .body;
    app.route("gen-*").await;
    let routes = app.get("/api/v1/routes").await.body;
    let settings = app.get("/api/v1/settings").await.body;

    let dir = std::env::temp_dir().join(format!("switchyard-client-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&document()).unwrap()).unwrap();
    // No post hooks: the generator would otherwise look for ruff to format its output.
    let config = dir.join("config.yaml");
    std::fs::write(&config, "post_hooks: []\n").unwrap();
    let generated = Command::new(&python)
        .args(["-m", "openapi_python_client", "generate", "--meta", "none"])
        .arg("--path")
        .arg(&file)
        .arg("--config")
        .arg(&config)
        .arg("--output-path")
        .arg(dir.join("switchyard_client"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run SWITCHYARD_TEST_PYTHON: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&generated.stdout),
        String::from_utf8_lossy(&generated.stderr)
    );
    assert!(generated.status.success(), "openapi-python-client: {text}");
    assert!(
        !text.contains("Warning") && !text.contains("Error"),
        "the generator skipped parts of the document: {text}"
    );

    let script = r#"
import importlib, json, pkgutil, sys
import switchyard_client as client
modules = [m.name for m in pkgutil.walk_packages(client.__path__, client.__name__ + ".")]
for name in modules:
    importlib.import_module(name)
from switchyard_client.models.channel_view import ChannelView
from switchyard_client.models.page_route_view import PageRouteView
from switchyard_client.models.settings import Settings
channel = ChannelView.from_dict(json.loads(sys.argv[1]))
routes = PageRouteView.from_dict(json.loads(sys.argv[2]))
settings = Settings.from_dict(json.loads(sys.argv[3]))
print(json.dumps({"modules": len(modules), "channel": channel.name,
                  "route": routes.data[0].model_pattern, "retry_times": settings.retry_times}))
"#;
    let run = Command::new(&python)
        .current_dir(&dir)
        .args(["-c", script])
        .arg(channel.to_string())
        .arg(routes.to_string())
        .arg(settings.to_string())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the generated client: {out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let read: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(read["modules"].as_u64().unwrap() > 50, "{read}");
    assert_eq!(read["channel"], "generated");
    assert_eq!(read["route"], "gen-*");
    assert_eq!(read["retry_times"], 2);
    let _ = std::fs::remove_dir_all(&dir);
}
