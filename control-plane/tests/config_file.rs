//! Configuration as code against real Postgres: export / plan / apply over the admin API, and the
//! `switchyard-control-plane config` subcommands of the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use common::{database_url, postgres_addr, test_app, TestApp, ADMIN_TOKEN};
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tower::ServiceExt;

/// Sends a YAML body (the configuration file) and returns (status, JSON body, revision header).
async fn send_yaml(app: &TestApp, path: &str, yaml: &str) -> (StatusCode, Value, Option<i64>) {
    let reply = app.post_yaml(path, yaml, ADMIN_TOKEN).await;
    let revision = reply.revision();
    let body = serde_json::from_str(&reply.text).unwrap_or(Value::String(reply.text));
    (reply.status, body, revision)
}

async fn export(app: &TestApp) -> String {
    let reply = app.get("/api/v1/config").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.headers.get("content-type").unwrap(),
        "text/yaml; charset=utf-8"
    );
    reply.text
}

/// A fleet with one of everything, built through the REST API. Returns the member ids.
async fn build_fleet(app: &TestApp) -> (i64, i64) {
    let openai = app.channel("openai").await;
    app.create(
        &format!("/api/v1/channels/{openai}/credentials"),
        json!({"secret_env": "OPENAI_API_KEY"}),
    )
    .await;
    let vllm = app
        .create(
            "/api/v1/channels",
            json!({"name": "vllm", "provider": "openai", "base_url": "https://vllm.test/v1",
                   "responses_api": false}),
        )
        .await;
    app.create(
        &format!("/api/v1/channels/{vllm}/credentials"),
        json!({"secret_env": "VLLM_API_KEY"}),
    )
    .await;
    let backup = app
        .create(
            "/api/v1/channels",
            json!({"name": "backup", "provider": "anthropic", "base_url": "https://anthropic.test/",
                   "max_concurrency": 8, "retry_status_codes": [429, 503]}),
        )
        .await;
    app.create(
        &format!("/api/v1/channels/{backup}/credentials"),
        json!({"secret_env": "ANTHROPIC_API_KEY", "enabled": false}),
    )
    .await;
    let route = app.route("gpt-4o").await;
    let a = app
        .member(
            route,
            json!({"channel_id": openai, "upstream_model": "gpt-4o", "weight": 1}),
        )
        .await;
    let b = app
        .member(
            route,
            json!({"channel_id": backup, "upstream_model": "claude", "weight": 1, "group_name": "default"}),
        )
        .await;
    let other = app.route("claude-*").await;
    app.member(
        other,
        json!({"channel_id": backup, "upstream_model": "claude", "priority": 2, "canary": true}),
    )
    .await;
    let reply = app
        .patch(
            &format!("/api/v1/routes/{route}"),
            json!({"routing_mode": "single", "single_member_id": a, "retry_times": 3}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let team = app
        .create(
            "/api/v1/teams",
            json!({"name": "research", "models": ["gpt-4o", "claude-*"], "members": [a, b],
                   "plan": {b.to_string(): {"weight": 5}}, "retry_limit": 2}),
        )
        .await;
    let token = app
        .create(
            "/api/v1/tokens",
            json!({"name": "ci", "team_id": team, "expires_at": "2031-01-31T00:00:00Z"}),
        )
        .await;
    app.create(
        "/api/v1/prices",
        json!({"channel_id": openai, "model_pattern": "gpt-*", "input_per_million": "2.5",
               "output_per_million": "10", "cached_input_per_million": "1.25"}),
    )
    .await;
    for (scope, scope_id, metric, window, value) in [
        ("token", token, "requests", Some("minute"), json!(600)),
        ("team", team, "spend", Some("month"), json!("25.5")),
        ("route", route, "concurrent", None, json!(4)),
        ("channel", openai, "tokens", Some("minute"), json!(90000)),
        ("member", b, "requests", Some("day"), json!(10)),
    ] {
        app.create(
            "/api/v1/limits",
            json!({"scope": scope, "scope_id": scope_id, "metric": metric, "window": window,
                   "value": value}),
        )
        .await;
    }
    app.create(
        "/api/v1/shadows",
        json!({"name": "try-claude", "model_pattern": "gpt-4o", "target_member_id": b,
               "sample_percent": 12.5, "max_rps": 20, "max_daily_spend_usd": "3.75",
               "expires_at": "2031-01-31T00:00:00Z", "error_rate_stop": 0.25,
               "error_rate_min_sample": 40}),
    )
    .await;
    app.create(
        "/api/v1/shadows",
        json!({"name": "try-llama", "model_pattern": "claude-*", "target_channel_id": vllm,
               "target_model": "llama-3", "sample_percent": 100, "max_rps": 5,
               "enabled": false}),
    )
    .await;
    let reply = app.put("/api/v1/settings", json!({"retry_times": 4})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    (a, b)
}

/// A second, empty control plane: its own freshly migrated database.
async fn fresh_control_plane(pool: &PgPool, name: &str) -> TestApp {
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
        .execute(pool)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(pool)
        .await
        .unwrap();
    let options = pool.connect_options().as_ref().clone().database(name);
    let fresh = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    switchyard_control_plane::db::migrate(&fresh).await.unwrap();
    test_app(fresh)
}

async fn drop_control_plane(pool: &PgPool, fresh: TestApp, name: &str) {
    fresh.pool.close().await;
    drop(fresh);
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn a_fleet_exported_and_applied_to_an_empty_control_plane_exports_identically(pool: PgPool) {
    let app = test_app(pool.clone());
    build_fleet(&app).await;
    let first = export(&app).await;
    assert_eq!(export(&app).await, first, "two exports of one state differ");
    for expected in [
        "${OPENAI_API_KEY}",
        "token_sha256:",
        "single_member_id:",
        "spend",
        "retry_times: 4",
        "responses_api: false",
        "name: try-claude",
        "sample_percent: 12.5",
        "max_daily_spend_usd: '3.75'",
        "error_rate_stop: 0.25",
        "target_channel: vllm",
        "target_model: llama-3",
    ] {
        assert!(first.contains(expected), "{expected} missing from\n{first}");
    }

    let fresh = fresh_control_plane(&pool, "switchyard_config_round_trip").await;
    let revision = fresh.revision().await;
    let (status, body, header) = send_yaml(&fresh, "/api/v1/config/apply", &first).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["revision"], json!(revision + 1), "{body}");
    assert_eq!(header, Some(revision + 1));
    assert_eq!(
        fresh.revision().await,
        revision + 1,
        "one apply, one revision"
    );
    let second = export(&fresh).await;
    assert_eq!(second, first, "the round trip changed the export");

    // The applied tables compile to the same routing as the original.
    let original = app.refresh().await;
    let copy = fresh.refresh().await;
    assert!(original > 0 && copy > 0);
    let published = fresh.publisher.current().unwrap();
    let vllm = published
        .snapshot
        .channels()
        .find(|c| c.name == "vllm")
        .unwrap();
    assert!(
        vllm.chat_completions_only(),
        "the apply kept responses_api: false"
    );

    // Applying the same file again changes nothing and creates no revision.
    let audit = fresh.audit_rows().await;
    let (status, body, header) = send_yaml(&fresh, "/api/v1/config/apply", &first).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["revision"], Value::Null, "{body}");
    assert_eq!(body["changes"], json!([]));
    assert_eq!(header, None);
    assert_eq!(fresh.revision().await, revision + 1);
    assert_eq!(fresh.audit_rows().await, audit);
    drop_control_plane(&pool, fresh, "switchyard_config_round_trip").await;
}

/// The exported file with member `member`'s weight set to `weight`.
fn with_weight(yaml: &str, member: i64, weight: i32) -> String {
    let mut config = switchyard_config::parse_raw(yaml).unwrap();
    let target = config
        .routes
        .iter_mut()
        .flat_map(|r| r.members.iter_mut())
        .find(|m| m.id == Some(member))
        .unwrap();
    target.weight = weight;
    switchyard_config::to_yaml(&config).unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn plan_shows_the_dry_runs_probabilities_and_apply_is_one_audited_revision(pool: PgPool) {
    let app = test_app(pool);
    let openai = app.channel("openai").await;
    let other = app.channel("other").await;
    for channel in [openai, other] {
        app.create(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret_env": "KEY"}),
        )
        .await;
    }
    let route = app.route("gpt-4o").await;
    let a = app
        .member(
            route,
            json!({"channel_id": openai, "upstream_model": "gpt-4o"}),
        )
        .await;
    let b = app
        .member(
            route,
            json!({"channel_id": other, "upstream_model": "gpt-4o"}),
        )
        .await;
    let file = export(&app).await;

    // Unchanged: nothing to do.
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &file).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["changes"], json!([]), "{plan}");
    assert_eq!(plan["traffic"]["affected"], json!([]), "{plan}");

    // One weight: the field, and the same probabilities as the dry run of that PATCH.
    let changed = with_weight(&file, b, 3);
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &changed).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(
        plan["changes"],
        json!([{"resource": "member", "key": b.to_string(), "action": "change",
                "fields": [{"field": "weight", "before": 1, "after": 3}]}]),
        "{plan}"
    );
    let dry = app
        .post(
            "/api/v1/dry-run",
            json!({"changes": [{"op": "patch", "resource": "member", "id": b, "body": {"weight": 3}}]}),
        )
        .await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    assert_eq!(plan["traffic"]["affected"], dry.body["affected"], "{plan}");
    let default = plan["traffic"]["affected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["group"] == "default" && s["team_id"].is_null())
        .unwrap();
    let member = |id: i64| {
        default["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["member_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(member(a)["before"], json!(0.5));
    assert_eq!(member(a)["after"], json!(0.25));
    assert_eq!(member(b)["after"], json!(0.75));

    // The plan wrote nothing.
    let revision = app.revision().await;
    let audit = app.audit_rows().await;
    let (_, again, _) = send_yaml(&app, "/api/v1/config/plan", &changed).await;
    assert_eq!(again["changes"], plan["changes"]);
    assert_eq!(app.revision().await, revision);

    // Apply: exactly one revision and one audit row naming the apply.
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/config/apply")
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .header("x-switchyard-actor", "ci-pipeline")
        .body(Body::from(changed.clone()))
        .unwrap();
    let response = app.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(app.revision().await, revision + 1);
    assert_eq!(app.audit_rows().await, audit + 1);
    let (actor, resource, detail): (String, String, Value) =
        sqlx::query_as("SELECT actor, resource, detail FROM audit_log ORDER BY id DESC LIMIT 1")
            .fetch_one(&app.pool)
            .await
            .map(|(a, r, d): (String, String, sqlx::types::Json<Value>)| (a, r, d.0))
            .unwrap();
    assert_eq!(
        (actor.as_str(), resource.as_str()),
        ("bootstrap (ci-pipeline)", "config")
    );
    assert_eq!(detail["apply"]["changed"], 1, "{detail}");
    assert_eq!(detail["apply"]["changes"][0]["key"], b.to_string());
    let weight: i32 = sqlx::query_scalar("SELECT weight FROM route_members WHERE id = $1")
        .bind(b)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(weight, 3);

    // Again: nothing changes, no revision.
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &changed).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["revision"], Value::Null);
    assert_eq!(app.revision().await, revision + 1);
    assert_eq!(export(&app).await, changed);
}

/// A channel's pass-through patterns are exported, applied from the file (a change to them is
/// one patch of that channel), and a bad one in the file is refused naming its place.
#[sqlx::test(migrations = "../migrations")]
async fn pass_through_patterns_export_and_apply(pool: PgPool) {
    let app = test_app(pool);
    let created = app
        .create(
            "/api/v1/channels",
            json!({"name": "oa", "provider": "openai", "base_url": "https://api.openai.test/v1",
                   "passthrough": ["/v1/fine_tuning/*"]}),
        )
        .await;
    app.create(
        &format!("/api/v1/channels/{created}/credentials"),
        json!({"secret_env": "OPENAI_API_KEY"}),
    )
    .await;
    let file = export(&app).await;
    assert!(
        file.contains("  passthrough:\n  - /v1/fine_tuning/*\n"),
        "{file}"
    );
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &file).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["changes"],
        json!([]),
        "an unchanged file changes nothing"
    );

    let changed = file.replace(
        "  - /v1/fine_tuning/*\n",
        "  - /v1/fine_tuning/*\n  - /v1/files\n",
    );
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &changed).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let channel = app.get(&format!("/api/v1/channels/{created}")).await;
    assert_eq!(
        channel.body["passthrough"],
        json!(["/v1/fine_tuning/*", "/v1/files"])
    );
    assert_eq!(export(&app).await, changed);

    let bad = changed.replace("  - /v1/files\n", "  - v1/files\n");
    for path in ["/api/v1/config/plan", "/api/v1/config/apply"] {
        let (status, body, _) = send_yaml(&app, path, &bad).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(
            body["error"]["param"], "channels[0].passthrough[1]",
            "{body}"
        );
    }
    assert_eq!(export(&app).await, changed);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_bad_file_applies_nothing_and_names_the_problem(pool: PgPool) {
    let app = test_app(pool);
    build_fleet(&app).await;
    let file = export(&app).await;
    let revision = app.revision().await;
    let audit = app.audit_rows().await;
    let cases: Vec<(String, &str)> = vec![
        ("channels: [\n".to_owned(), "channels"),
        ("[1, 2]\n".to_owned(), "file"),
        ("# nothing\n\n".to_owned(), "file"),
        (
            file.replacen("  provider: anthropic", "  provider: anthropic\n  colour: red", 1),
            "channels[0].colour",
        ),
        (
            file.replacen("channel: openai", "channel: nowhere", 1),
            "routes[1].members[0].channel",
        ),
        (
            "channels:\n- name: a\n  provider: openai\n  base_url: https://a.test\n  credentials: [{id: 999}]\n".to_owned(),
            "channels[0].credentials[0].id",
        ),
        (
            file.replacen("team: research", "team: nobody", 1),
            "tokens[0].team",
        ),
    ];
    for (yaml, param) in &cases {
        for path in ["/api/v1/config/plan", "/api/v1/config/apply"] {
            let (status, body, _) = send_yaml(&app, path, yaml).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{path} {param}: {body}"
            );
            assert_eq!(body["error"]["param"], *param, "{body}");
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(param),
                "{body}"
            );
        }
    }
    // Too large: the JSON error shape, like every other rejection.
    let huge = format!("# {}\n", "x".repeat(2 * 1024 * 1024));
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large", "{body}");

    assert_eq!(app.revision().await, revision);
    assert_eq!(app.audit_rows().await, audit);
    assert_eq!(export(&app).await, file);
}

#[sqlx::test(migrations = "../migrations")]
async fn secrets_stay_out_of_exports_and_plans(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("openai").await;
    let stored = app
        .create(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret": "sk-LEAKME-stored-0123456789"}),
        )
        .await;
    let file = export(&app).await;
    assert!(!file.contains("LEAKME"), "{file}");
    assert!(file.contains(&format!("id: {stored}")), "{file}");
    // The export applies as it is: the stored secret is kept.
    let (_, body, _) = send_yaml(&app, "/api/v1/config/apply", &file).await;
    assert_eq!(body["revision"], Value::Null, "{body}");

    // A new inline secret: planned and applied without ever being shown.
    let mut config = switchyard_config::parse_raw(&file).unwrap();
    config.channels[0]
        .credentials
        .push(switchyard_config::RawCredential::Plain(
            "sk-LEAKME-new-0123456789".to_owned(),
        ));
    let added = switchyard_config::to_yaml(&config).unwrap();
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &added).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert!(!plan.to_string().contains("LEAKME"), "{plan}");
    assert!(plan.to_string().contains("(secret)"), "{plan}");
    let (status, applied, _) = send_yaml(&app, "/api/v1/config/apply", &added).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert!(!applied.to_string().contains("LEAKME"));
    let after = export(&app).await;
    assert!(!after.contains("LEAKME"), "{after}");
    let (_, again, _) = send_yaml(&app, "/api/v1/config/apply", &added).await;
    assert_eq!(again["revision"], Value::Null, "{again}");

    // Header values and base_url passwords are masked as the API shows them, and a masked
    // value keeps what is stored.
    let reply = app
        .patch(
            &format!("/api/v1/channels/{channel}"),
            json!({"base_url": "https://user:LEAKME-password@upstream.test/v1",
                   "headers": {"x-api-key": "hdr-LEAKME-0123456789"}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let masked = export(&app).await;
    assert!(!masked.contains("LEAKME"), "{masked}");
    assert!(masked.contains("x-api-key: '****6789'"), "{masked}");
    assert!(
        masked.contains("https://user:***@upstream.test/v1"),
        "{masked}"
    );
    let (_, body, _) = send_yaml(&app, "/api/v1/config/apply", &masked).await;
    assert_eq!(body["revision"], Value::Null, "{body}");
    let stored: (String, Value) = sqlx::query_as::<_, (String, sqlx::types::Json<Value>)>(
        "SELECT base_url, headers FROM channels WHERE id = $1",
    )
    .bind(channel)
    .fetch_one(&app.pool)
    .await
    .map(|(url, headers)| (url, headers.0))
    .unwrap();
    assert_eq!(stored.0, "https://user:LEAKME-password@upstream.test/v1");
    assert_eq!(stored.1["x-api-key"], "hdr-LEAKME-0123456789");
    // A new value is planned masked.
    let changed = masked.replace("'****6789'", "hdr-LEAKME-new-9876543210");
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &changed).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert!(!plan.to_string().contains("LEAKME"), "{plan}");
    assert_eq!(
        plan["changes"][0]["fields"][0]["field"], "headers",
        "{plan}"
    );
    assert_eq!(
        plan["changes"][0]["fields"][0]["after"]["x-api-key"], "****3210",
        "{plan}"
    );
    // On a control plane that stores nothing to keep, a masked value is refused by its path.
    let fresh = fresh_control_plane(&app.pool, "switchyard_config_masked").await;
    let (status, body, _) = send_yaml(&fresh, "/api/v1/config/apply", &masked).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["error"]["param"], "channels[0].headers.x-api-key",
        "{body}"
    );
    assert!(!body.to_string().contains("LEAKME"), "{body}");
    drop_control_plane(&app.pool, fresh, "switchyard_config_masked").await;
}

fn cli(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard-control-plane"))
        .arg("config")
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("SWITCHYARD_ADMIN_TOKEN")
        .output()
        .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn the_binary_exports_plans_and_applies(pool: PgPool) {
    let app = test_app(pool.clone());
    let (_, b) = build_fleet(&app).await;
    let opts = pool.connect_options();
    let url = database_url(&opts, &postgres_addr(&opts));

    let output = cli(&url, &["export"]);
    assert!(output.status.success(), "{output:?}");
    let file = String::from_utf8(output.stdout).unwrap();
    assert_eq!(file, export(&app).await);

    let dir = std::env::temp_dir().join(format!("switchyard-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fleet.yaml");
    std::fs::write(&path, with_weight(&file, b, 7)).unwrap();
    let path = path.to_str().unwrap();

    let output = cli(&url, &["plan", "-f", path]);
    assert!(output.status.success(), "{output:?}");
    let plan = String::from_utf8(output.stdout).unwrap();
    assert!(plan.contains(&format!("~ member \"{b}\"")), "{plan}");
    assert!(plan.contains("weight: 1 -> 7"), "{plan}");
    assert!(
        plan.contains("Plan: 0 to add, 1 to change, 0 to remove."),
        "{plan}"
    );

    let revision = app.revision().await;
    let output = cli(&url, &["apply", "-f", path]);
    assert!(output.status.success(), "{output:?}");
    let applied = String::from_utf8(output.stdout).unwrap();
    assert!(
        applied.contains(&format!("Applied as revision {}.", revision + 1)),
        "{applied}"
    );
    let output = cli(&url, &["apply", "-f", path]);
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("No changes"));
    assert_eq!(app.revision().await, revision + 1);

    // A bad file: exit 1, the field path on stderr, nothing applied.
    std::fs::write(
        dir.join("bad.yaml"),
        "routes:\n- model_pattern: m\n  members: [{channel: x}]\n",
    )
    .unwrap();
    let output = cli(
        &url,
        &["apply", "-f", dir.join("bad.yaml").to_str().unwrap()],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("routes[0].members[0].channel: unknown channel \"x\""),
        "{stderr}"
    );
    assert_eq!(app.revision().await, revision + 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The file with shadow rule `name` changed by `edit`.
fn with_shadow(
    yaml: &str,
    name: &str,
    edit: impl FnOnce(&mut switchyard_config::RawShadow),
) -> String {
    let mut config = switchyard_config::parse_raw(yaml).unwrap();
    edit(config.shadows.iter_mut().find(|s| s.name == name).unwrap());
    switchyard_config::to_yaml(&config).unwrap()
}

async fn shadow_row(app: &TestApp, name: &str) -> Option<(i32, Option<String>)> {
    sqlx::query_as("SELECT sample_basis_points, stopped_reason FROM shadows WHERE name = $1")
        .bind(name)
        .fetch_optional(&app.pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn shadow_rules_are_planned_and_applied_and_a_stop_lasts_until_the_file_changes_the_rule(
    pool: PgPool,
) {
    let app = test_app(pool.clone());
    let (a, _) = build_fleet(&app).await;
    let file = export(&app).await;

    // The rule stopped by itself (the error-rate stop): the file does not say so, so applying
    // the unchanged file changes nothing and the stop stays.
    sqlx::query("UPDATE shadows SET stopped_reason = 'error_rate', stopped_at = now() WHERE name = 'try-claude'")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        export(&app).await,
        file,
        "a stop is state, not configuration"
    );
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &file).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changes"], json!([]), "{body}");
    assert_eq!(
        shadow_row(&app, "try-claude").await,
        Some((1250, Some("error_rate".to_owned())))
    );

    // Changing the rule in the file: the plan says what changes, the apply writes it and the
    // rule runs again.
    let changed = with_shadow(&file, "try-claude", |s| {
        s.sample_percent = 30.0;
        s.target_member = Some(a);
    });
    let (status, body, _) = send_yaml(&app, "/api/v1/config/plan", &changed).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let changes = body["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{body}");
    assert_eq!(changes[0]["resource"], "shadow", "{body}");
    assert_eq!(changes[0]["key"], "try-claude", "{body}");
    assert_eq!(changes[0]["action"], "change", "{body}");
    let fields: Vec<&str> = changes[0]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["sample_percent", "target_member"], "{body}");
    assert_eq!(
        shadow_row(&app, "try-claude").await,
        Some((1250, Some("error_rate".to_owned()))),
        "a plan writes nothing"
    );
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &changed).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(shadow_row(&app, "try-claude").await, Some((3000, None)));
    let member: Option<i64> =
        sqlx::query_scalar("SELECT target_member_id FROM shadows WHERE name = 'try-claude'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(member, Some(a));
    let snapshot = app.refresh().await;
    assert!(snapshot > 0);
    let published = app.publisher.current().unwrap();
    let rule = published
        .snapshot
        .shadows()
        .iter()
        .find(|r| r.name == "try-claude")
        .unwrap();
    assert_eq!(rule.sample_basis_points, 3000);

    // A rule the file leaves out is deleted; a new one is created.
    let mut config = switchyard_config::parse_raw(&changed).unwrap();
    config.shadows.retain(|s| s.name != "try-llama");
    config.shadows[0].name = "try-claude-2".to_owned();
    let (status, body, _) = send_yaml(
        &app,
        "/api/v1/config/apply",
        &switchyard_config::to_yaml(&config).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM shadows ORDER BY name")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(names, ["try-claude-2"]);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_shadow_rule_naming_a_member_the_file_gives_no_id_is_refused(pool: PgPool) {
    let app = test_app(pool.clone());
    build_fleet(&app).await;
    let file = with_shadow(&export(&app).await, "try-claude", |s| {
        s.target_member = Some(987_654);
    });
    let (status, body, _) = send_yaml(&app, "/api/v1/config/plan", &file).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["param"], "shadows[0].target_member", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("unknown member id 987654"), "{message}");
}

/// `plan --detailed-exitcode` tells CI whether the file drifts from the tables: 0 no changes,
/// 2 changes, 1 an error. Without it a plan exits 0 whatever it shows.
#[sqlx::test(migrations = "../migrations")]
async fn plan_with_detailed_exitcode_exits_2_when_it_shows_changes(pool: PgPool) {
    let app = test_app(pool.clone());
    let (_, b) = build_fleet(&app).await;
    let opts = pool.connect_options();
    let url = database_url(&opts, &postgres_addr(&opts));
    let dir = std::env::temp_dir().join(format!("switchyard-exitcode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = export(&app).await;
    let same = dir.join("same.yaml");
    std::fs::write(&same, &file).unwrap();
    let changed = dir.join("changed.yaml");
    std::fs::write(&changed, with_weight(&file, b, 7)).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "routes:\n- model_pattern: m\n  members: [{channel: x}]\n",
    )
    .unwrap();
    let code = |path: &std::path::Path, detailed: bool| {
        let mut args = vec!["plan", "-f", path.to_str().unwrap()];
        if detailed {
            args.push("--detailed-exitcode");
        }
        cli(&url, &args).status.code()
    };
    assert_eq!(code(&same, true), Some(0));
    assert_eq!(code(&changed, true), Some(2));
    assert_eq!(code(&bad, true), Some(1));
    assert_eq!(code(&dir.join("absent.yaml"), true), Some(1));
    // The default is unchanged.
    assert_eq!(code(&same, false), Some(0));
    assert_eq!(code(&changed, false), Some(0));
    assert_eq!(code(&bad, false), Some(1));
    // With the JSON output too; a usage error is an error.
    let output = cli(
        &url,
        &[
            "plan",
            "-f",
            changed.to_str().unwrap(),
            "--json",
            "--detailed-exitcode",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(plan["changes"].as_array().unwrap().len(), 1, "{plan}");
    let output = cli(&url, &["plan", "--detailed-exitcode"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

const NO_IDS: &str = "\
channels:
- name: a
  provider: openai
  base_url: https://a.test
  credentials: ['${A_KEY}']
- name: b
  provider: openai
  base_url: https://b.test
  credentials: ['${B_KEY}']
routes:
- model_pattern: gpt-4o
  members:
  - {channel: a}
  - {channel: b, upstream_model: gpt-4o-mini, weight: 3}
  - {channel: b, upstream_model: gpt-4o-mini, group: batch}
  - {channel: b, upstream_model: gpt-4o-mini, weight: 5}
- model_pattern: claude
  members:
  - {channel: a, upstream_model: gpt-4o}
";

async fn member_ids(pool: &PgPool) -> Vec<(i64, String, i32)> {
    sqlx::query_as(
        "SELECT m.id, r.model_pattern, m.weight FROM route_members m \
         JOIN routes r ON r.id = m.route_id ORDER BY m.id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Members the file gives no id are matched to the stored members by route, channel, upstream
/// model and group (in order, when several share them): applying the same file again plans
/// nothing, and a change to one of them changes that member rather than replacing them all.
#[sqlx::test(migrations = "../migrations")]
async fn members_without_ids_are_matched_by_their_natural_key(pool: PgPool) {
    let app = test_app(pool.clone());
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", NO_IDS).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stored = member_ids(&pool).await;
    assert_eq!(stored.len(), 5, "{stored:?}");

    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", NO_IDS).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["changes"], json!([]), "{plan}");
    let revision = app.revision().await;
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", NO_IDS).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["revision"], Value::Null, "{body}");
    assert_eq!(app.revision().await, revision);
    assert_eq!(member_ids(&pool).await, stored, "no member was recreated");

    // The second of the two members that share route, channel, model and group: a change of
    // that member, by its id.
    let changed = NO_IDS.replace("weight: 5", "weight: 6");
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &changed).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let changes = plan["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{plan}");
    let fifth = stored
        .iter()
        .filter(|(_, route, _)| route == "gpt-4o")
        .nth(3)
        .unwrap();
    assert_eq!(changes[0]["resource"], "member", "{plan}");
    assert_eq!(changes[0]["key"], fifth.0.to_string(), "{plan}");
    assert_eq!(changes[0]["action"], "change", "{plan}");
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &changed).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let after = member_ids(&pool).await;
    let ids = |rows: &[(i64, String, i32)]| rows.iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(ids(&after), ids(&stored), "the same members, one changed");
    assert!(
        after.contains(&(fifth.0, "gpt-4o".to_owned(), 6)),
        "{after:?}"
    );

    // A member the file drops is removed; one it adds is added; the others stay.
    let fewer = changed.replace(
        "  - {channel: b, upstream_model: gpt-4o-mini, group: batch}\n",
        "",
    );
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &fewer).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let actions: Vec<(&str, &str)> = plan["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["resource"].as_str().unwrap(),
                c["action"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(actions, [("member", "remove")], "{plan}");
}

/// An Azure channel's `api-version` entry is a version, not a secret: the export writes it in
/// clear (the other header values stay masked), so the export applies to an empty control plane
/// and, applied back, plans no change.
#[sqlx::test(migrations = "../migrations")]
async fn an_azure_channels_api_version_is_exported_in_clear_and_round_trips(pool: PgPool) {
    let app = test_app(pool.clone());
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": "azure-eastus", "provider": "azure",
                   "base_url": "https://contoso-eastus.openai.azure.com",
                   "headers": {"api-version": "2025-04-01-preview"}}),
        )
        .await;
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret_env": "AZURE_KEY"}),
    )
    .await;
    let route = app.route("gpt-4o").await;
    app.member(
        route,
        json!({"channel_id": channel, "upstream_model": "gpt-4o-prod"}),
    )
    .await;
    let file = export(&app).await;
    let config = switchyard_config::parse_raw(&file).unwrap();
    assert_eq!(
        config.channels[0]
            .headers
            .get("api-version")
            .map(String::as_str),
        Some("2025-04-01-preview"),
        "{file}"
    );
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &file).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["changes"], json!([]), "{plan}");

    // A new version is planned in clear.
    let newer = file.replace("2025-04-01-preview", "2024-10-21");
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &newer).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(
        plan["changes"][0]["fields"][0]["after"]["api-version"], "2024-10-21",
        "{plan}"
    );

    let fresh = fresh_control_plane(&pool, "switchyard_config_azure").await;
    let (status, body, _) = send_yaml(&fresh, "/api/v1/config/apply", &file).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(export(&fresh).await, file);
    let (status, plan, _) = send_yaml(&fresh, "/api/v1/config/plan", &file).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["changes"], json!([]), "{plan}");
    drop_control_plane(&pool, fresh, "switchyard_config_azure").await;
}

/// A file cannot give a token or a shadow rule a new expiry in the past (the admin API refuses
/// it too); an expiry the tables already store, passed or not, applies as it is.
#[sqlx::test(migrations = "../migrations")]
async fn a_file_cannot_give_a_past_expiry(pool: PgPool) {
    let app = test_app(pool.clone());
    build_fleet(&app).await;
    let file = export(&app).await;
    let past = "2000-01-01T00:00:00Z";
    let mut config = switchyard_config::parse_raw(&file).unwrap();
    config.tokens[0].expires_at = Some(past.to_owned());
    let token_file = switchyard_config::to_yaml(&config).unwrap();
    let shadow_file = with_shadow(&file, "try-llama", |s| s.expires_at = Some(past.to_owned()));
    for (text, param) in [
        (&token_file, "tokens[0].expires_at"),
        (&shadow_file, "shadows[1].expires_at"),
    ] {
        for path in ["/api/v1/config/plan", "/api/v1/config/apply"] {
            let (status, body, _) = send_yaml(&app, path, text).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {body}");
            assert_eq!(body["error"]["param"], param, "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains("must be in the future"), "{message}");
        }
    }
    assert_eq!(export(&app).await, file, "nothing was applied");

    // Expired while stored: the export says so and applies back as it is.
    sqlx::query("UPDATE tokens SET expires_at = $1::timestamptz")
        .bind(past)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE shadows SET expires_at = $1::timestamptz")
        .bind(past)
        .execute(&pool)
        .await
        .unwrap();
    let expired = export(&app).await;
    assert!(expired.contains("2000-01-01T00:00:00Z"), "{expired}");
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &expired).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changes"], json!([]), "{body}");
}

/// The plan's changes as (resource, key, action).
fn changes(plan: &Value) -> Vec<(String, String, String)> {
    plan["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["resource"].as_str().unwrap().to_owned(),
                c["key"].as_str().unwrap().to_owned(),
                c["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn webhooks_and_budget_thresholds_apply_and_export_without_a_secret(pool: PgPool) {
    let app = test_app(pool.clone());
    let file = "teams:\n- name: research\nlimits:\n- team: research\n  metric: spend\n  \
                window: month\n  value: '50'\n  notify_at: [90, 25]\nwebhooks:\n- name: ops\n  \
                url: https://hooks.example.com/services/T0/path-secret\n  kind: slack\n  \
                events: [budget_threshold, trial_finished]\n  secret: ${OPS_HOOK_SECRET}\n";
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", file).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let hooks = app.get("/api/v1/webhooks").await;
    let hook = &hooks.body["data"][0];
    assert_eq!(hook["secret_env"], "OPS_HOOK_SECRET", "{}", hooks.text);
    assert_eq!(hook["kind"], "slack");
    let stored: (String, Option<String>) =
        sqlx::query_as("SELECT url, secret FROM webhooks WHERE name = 'ops'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        stored,
        (
            "https://hooks.example.com/services/T0/path-secret".to_owned(),
            None
        ),
        "the whole URL is stored; no secret is"
    );
    let limits = app.get("/api/v1/limits").await;
    assert_eq!(limits.body["data"][0]["notify_at"], json!([25, 90]));

    // The export names the secret's variable and hides the URL's path; applied again it
    // changes nothing.
    let exported = export(&app).await;
    assert!(
        exported.contains("secret: ${OPS_HOOK_SECRET}"),
        "{exported}"
    );
    assert!(
        exported.contains("url: https://hooks.example.com/****"),
        "{exported}"
    );
    assert!(!exported.contains("path-secret"), "{exported}");
    assert!(exported.contains("notify_at:"), "{exported}");
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/plan", &exported).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(changes(&plan), [], "{plan}");

    // A secret in clear is refused, naming the field; nothing is written.
    let clear = exported.replace("${OPS_HOOK_SECRET}", "whsec-in-clear-0123456789");
    let (status, body, _) = send_yaml(&app, "/api/v1/config/apply", &clear).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["param"], "webhooks[0].secret", "{body}");
    assert!(!body.to_string().contains("whsec-in-clear"), "{body}");

    // Another threshold list and the webhook gone: one change each.
    let changed = exported
        .replace("- 25\n", "- 50\n")
        .split("webhooks:")
        .next()
        .unwrap()
        .to_owned();
    let (status, plan, _) = send_yaml(&app, "/api/v1/config/apply", &changed).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let mut seen = changes(&plan);
    seen.sort();
    assert_eq!(
        seen,
        [
            (
                "limit".to_owned(),
                "team:research:spend:month".to_owned(),
                "change".to_owned()
            ),
            ("webhook".to_owned(), "ops".to_owned(), "remove".to_owned()),
        ],
        "{plan}"
    );
    assert_eq!(app.get("/api/v1/webhooks").await.body["data"], json!([]));
    let limits = app.get("/api/v1/limits").await;
    assert_eq!(limits.body["data"][0]["notify_at"], json!([50, 90]));
}
