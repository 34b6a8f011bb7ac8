//! Admin REST against a real Postgres (one throwaway database per test), in-process.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::{Method, StatusCode};
use common::{test_app, TestApp, ADMIN_TOKEN};
use serde_json::json;
use sqlx::PgPool;

// ------------------------------------------------------------------------------------- auth

#[sqlx::test(migrations = "../migrations")]
async fn missing_or_wrong_token_is_401_and_leaks_nothing(pool: PgPool) {
    let app = test_app(pool);
    app.channel("secret-channel").await;
    for token in [None, Some("wrong-token"), Some("")] {
        for path in [
            "/api/v1/channels",
            "/api/v1/openapi.json",
            "/console/routes/explain?model=x",
        ] {
            let reply = app.send(Method::GET, path, None, token).await;
            assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path} {token:?}");
            assert_eq!(reply.body["error"]["type"], "authentication_error");
            assert!(!reply.text.contains("secret-channel"));
        }
    }
    let write = app
        .send(
            Method::POST,
            "/api/v1/routes",
            Some(json!({"model_pattern": "x"})),
            None,
        )
        .await;
    assert_eq!(write.status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.get("/api/v1/routes").await.body["data"], json!([]));
}

#[sqlx::test(migrations = "../migrations")]
async fn health_and_metrics_are_open(pool: PgPool) {
    let app = test_app(pool);
    assert_eq!(
        app.send(Method::GET, "/healthz", None, None).await.status,
        StatusCode::OK
    );
    // No snapshot compiled yet: not ready.
    assert_eq!(
        app.send(Method::GET, "/readyz", None, None).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    app.refresh().await;
    assert_eq!(
        app.send(Method::GET, "/readyz", None, None).await.status,
        StatusCode::OK
    );
    let metrics = app.send(Method::GET, "/metrics", None, None).await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(
        metrics.text.contains("switchyard_cp_snapshot_revision 1"),
        "{}",
        metrics.text
    );
    assert!(
        metrics.text.contains(
            "switchyard_cp_http_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"} 1"
        ),
        "{}",
        metrics.text
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn openapi_lists_the_real_routes(pool: PgPool) {
    let app = test_app(pool);
    let doc = app.get("/api/v1/openapi.json").await;
    assert_eq!(doc.status, StatusCode::OK);
    let paths = doc.body["paths"].as_object().unwrap();
    for path in [
        "/api/v1/channels",
        "/api/v1/channels/{id}",
        "/api/v1/channels/{id}/events",
        "/api/v1/channels/{id}/credentials",
        "/api/v1/credentials/{id}",
        "/api/v1/routes",
        "/api/v1/routes/{id}",
        "/api/v1/routes/{id}/members",
        "/api/v1/members/{id}",
        "/api/v1/tokens",
        "/api/v1/tokens/{id}",
        "/api/v1/teams",
        "/api/v1/teams/{id}",
        "/api/v1/prices",
        "/api/v1/prices/{id}",
        "/api/v1/limits",
        "/api/v1/limits/{id}",
        "/api/v1/budgets",
        "/api/v1/settings",
        "/api/v1/state",
        "/api/v1/routes/explain",
        "/api/v1/audit",
    ] {
        assert!(paths.contains_key(path), "missing {path}");
    }
    assert!(paths["/api/v1/settings"].get("put").is_some());
    assert!(paths["/api/v1/settings"].get("patch").is_some());
    assert!(paths["/api/v1/channels/{id}"].get("delete").is_some());
}

// --------------------------------------------------------------------------------- channels

#[sqlx::test(migrations = "../migrations")]
async fn channel_crud_with_status_events(pool: PgPool) {
    let app = test_app(pool);
    let created = app
        .post(
            "/api/v1/channels",
            json!({
                "name": "openai-main", "provider": "openai", "base_url": "https://api.test/v1",
                "auto_ban": true, "max_concurrency": 8,
                "capabilities": {"max_context": 128000, "tools": true},
                "retry_status_codes": [409], "retry_error_patterns": ["overloaded"],
                "headers": {"x-org": "acme-corp-00001"}
            }),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let id = created.body["id"].as_i64().unwrap();
    assert_eq!(created.body["status"], "enabled");
    assert_eq!(created.body["capabilities"]["max_context"], 128000);
    assert_eq!(
        created.body["headers"]["x-org"], "****0001",
        "header values are masked"
    );
    assert!(created.revision().is_some());

    let got = app.get(&format!("/api/v1/channels/{id}")).await;
    assert_eq!(got.body["name"], "openai-main");

    let patched = app
        .patch(
            &format!("/api/v1/channels/{id}"),
            json!({"status": "disabled", "max_concurrency": null}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["status"], "disabled");
    assert_eq!(patched.body["max_concurrency"], json!(null));
    assert_eq!(patched.body["auto_ban"], true, "untouched fields stay");

    let events = app.get(&format!("/api/v1/channels/{id}/events")).await;
    let events = events.body["data"].as_array().unwrap().clone();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["from_status"], json!(null));
    assert_eq!(events[0]["to_status"], "enabled");
    assert_eq!(events[1]["from_status"], "enabled");
    assert_eq!(events[1]["to_status"], "disabled");
    assert!(events[1]["at"].as_str().unwrap().ends_with('Z'));

    assert_eq!(
        app.delete(&format!("/api/v1/channels/{id}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/channels/{id}")).await.status,
        StatusCode::NOT_FOUND
    );
}

/// An Azure OpenAI channel: created and read back like any other, its `api-version` entry
/// checked, and in the snapshot the proxies receive (the encoded bytes included) as `azure`.
#[sqlx::test(migrations = "../migrations")]
async fn an_azure_channel_reaches_the_snapshot(pool: PgPool) {
    let app = test_app(pool);
    let created = app
        .post(
            "/api/v1/channels",
            json!({
                "name": "azure-eastus", "provider": "azure",
                "base_url": "https://contoso-eastus.openai.azure.com",
                "headers": {"api-version": "2025-04-01-preview"}
            }),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["provider"], "azure");
    let channel = created.body["id"].as_i64().unwrap();
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret": "azure-key-0123456789abcdef"}),
    )
    .await;
    let route = app.route("gpt-4o").await;
    let member = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o-prod"}),
        )
        .await;
    let got = app.get(&format!("/api/v1/channels/{channel}")).await;
    assert_eq!(got.body["provider"], "azure");

    for snapshot in &published(&app).await {
        let ch = snapshot.channel(channel).unwrap();
        assert_eq!(ch.provider, switchyard_engine::Provider::Azure);
        assert_eq!(ch.base_url, "https://contoso-eastus.openai.azure.com");
        assert_eq!(
            ch.headers,
            [("api-version".to_owned(), "2025-04-01-preview".to_owned())]
        );
        let m = &snapshot.route(route).unwrap().members[0];
        assert_eq!((m.id, m.upstream_model.as_str()), (member, "gpt-4o-prod"));
    }

    // The version is checked (and not quoted); other providers' headers are not versions.
    let body = |provider: &str, version: &str| {
        json!({"name": format!("{provider}-v"), "provider": provider, "base_url": "https://x.test",
               "headers": {"api-version": version}})
    };
    let path = "/api/v1/channels";
    expect_invalid(
        &app,
        Method::POST,
        path,
        body("azure", "2024-10-21&key=SECRET"),
        "headers.api-version",
    )
    .await;
    expect_invalid(
        &app,
        Method::PATCH,
        &format!("{path}/{channel}"),
        json!({"headers": {"api-version": ""}}),
        "headers.api-version",
    )
    .await;
    // So is an entry for one kind of endpoint.
    expect_invalid(
        &app,
        Method::PATCH,
        &format!("{path}/{channel}"),
        json!({"headers": {"api-version-chat": "2024-10-21&key=SECRET"}}),
        "headers.api-version-chat",
    )
    .await;
    let reply = app.post(path, body("openai", "any value")).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

/// An Azure channel's `api-version` entry is a version, not a secret: the channel view shows it
/// as it is (as the export does and as proxies without the fleet token receive it), and so is an
/// `api-version-{kind}` entry; every other header value (a name of no kind included), and
/// `api-version` on another provider, stays masked.
#[sqlx::test(migrations = "../migrations")]
async fn an_azure_channels_api_version_is_shown_in_clear(pool: PgPool) {
    let app = test_app(pool);
    let headers = json!({"api-version": "2025-04-01-preview", "x-extra": "hdr-secret-0123456789",
                         "api-version-responses": "2025-05-01-preview",
                         "api-version-rerank": "0123456789 abcdef"});
    let azure = app
        .create(
            "/api/v1/channels",
            json!({"name": "azure", "provider": "azure",
                   "base_url": "https://r.openai.azure.com", "headers": headers}),
        )
        .await;
    let openai = app
        .create(
            "/api/v1/channels",
            json!({"name": "openai", "provider": "openai",
                   "base_url": "https://api.openai.test/v1", "headers": headers}),
        )
        .await;
    let got = app.get(&format!("/api/v1/channels/{azure}")).await;
    assert_eq!(
        got.body["headers"],
        json!({"api-version": "2025-04-01-preview", "x-extra": "****6789",
               "api-version-responses": "2025-05-01-preview",
               "api-version-rerank": "****cdef"}),
        "{}",
        got.text
    );
    let got = app.get(&format!("/api/v1/channels/{openai}")).await;
    assert_eq!(
        got.body["headers"],
        json!({"api-version": "****view", "x-extra": "****6789",
               "api-version-responses": "****view",
               "api-version-rerank": "****cdef"}),
        "{}",
        got.text
    );
    let listed = app.get("/api/v1/channels").await;
    assert!(
        listed
            .text
            .contains("\"api-version\":\"2025-04-01-preview\""),
        "{}",
        listed.text
    );
}

/// An OpenAI-compatible channel without the Responses API: `responses_api: false` accepted on
/// openai and azure channels, read back, patched, carried by the snapshot the proxies receive
/// (the encoded bytes included); refused on other providers with the field named.
#[sqlx::test(migrations = "../migrations")]
async fn a_channel_without_the_responses_api_reaches_the_snapshot(pool: PgPool) {
    let app = test_app(pool);
    let path = "/api/v1/channels";
    let created = app
        .post(
            path,
            json!({"name": "vllm", "provider": "openai", "base_url": "https://vllm.test/v1",
                   "responses_api": false}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["responses_api"], false);
    let channel = created.body["id"].as_i64().unwrap();
    assert_eq!(
        app.get(&format!("{path}/{channel}")).await.body["responses_api"],
        false
    );
    let azure = app
        .post(
            path,
            json!({"name": "old-azure", "provider": "azure",
                   "base_url": "https://old.openai.azure.com", "responses_api": false}),
        )
        .await;
    assert_eq!(azure.status, StatusCode::CREATED, "{}", azure.text);
    let default = app
        .post(
            path,
            json!({"name": "plain", "provider": "openai", "base_url": "https://api.openai.test/v1"}),
        )
        .await;
    assert_eq!(default.body["responses_api"], true);

    for snapshot in &published(&app).await {
        let ch = snapshot.channel(channel).unwrap();
        assert!(!ch.responses_api && ch.chat_completions_only());
        let plain = snapshot
            .channel(default.body["id"].as_i64().unwrap())
            .unwrap();
        assert!(plain.responses_api && !plain.chat_completions_only());
    }

    for provider in ["anthropic", "gemini"] {
        expect_invalid(
            &app,
            Method::POST,
            path,
            json!({"name": format!("{provider}-x"), "provider": provider,
                   "base_url": "https://x.test", "responses_api": false}),
            "responses_api",
        )
        .await;
    }
    // Moving it to another provider keeps the flag, so it is refused too.
    expect_invalid(
        &app,
        Method::PATCH,
        &format!("{path}/{channel}"),
        json!({"provider": "anthropic"}),
        "responses_api",
    )
    .await;
    let patched = app
        .patch(&format!("{path}/{channel}"), json!({"responses_api": true}))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["responses_api"], true);
}

/// `auth: workload`: accepted on azure, bedrock and vertex channels (a vertex one naming its
/// project), read back, carried by the snapshot (the encoded bytes included) as the channel's one
/// credential, kept when the fleet token is missing (it holds no secret); refused with the field
/// named on another provider, on a vertex URL without its project, for a channel that stores
/// credentials, and a credential refused on a workload channel.
#[sqlx::test(migrations = "../migrations")]
async fn a_workload_channel_holds_no_secret_and_reaches_the_snapshot(pool: PgPool) {
    let app = test_app(pool);
    let path = "/api/v1/channels";
    let created = app
        .post(
            path,
            json!({"name": "bedrock-role", "provider": "bedrock",
                   "base_url": "https://bedrock-runtime.eu-west-3.amazonaws.com", "auth": "workload"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["auth"], "workload");
    let channel = created.body["id"].as_i64().unwrap();
    assert_eq!(
        app.get(&format!("{path}/{channel}")).await.body["auth"],
        "workload"
    );
    for snapshot in &published(&app).await {
        let ch = snapshot.channel(channel).unwrap();
        assert_eq!(ch.credentials.len(), 1);
        assert_eq!(
            ch.credentials[0].secret,
            switchyard_engine::SecretSource::Workload
        );
        assert!(ch.credentials[0].enabled);
    }
    let mut wire = <switchyard_proto::v1::Snapshot as prost::Message>::decode(
        app.publisher.current().unwrap().encoded.clone(),
    )
    .unwrap();
    control_plane_withhold(&mut wire);
    let kept = wire.channels.iter().find(|c| c.id == channel).unwrap();
    assert_eq!(kept.credentials.len(), 1);
    assert!(
        !kept.secrets_withheld,
        "a workload channel has no secret to withhold"
    );

    // A credential cannot be added to it.
    expect_invalid(
        &app,
        Method::POST,
        &format!("{path}/{channel}/credentials"),
        json!({"secret_env": "AWS_KEYS"}),
        "channel_id",
    )
    .await;
    for (body, field) in [
        (
            json!({"name": "o", "provider": "openai", "base_url": "https://api.openai.test/v1", "auth": "workload"}),
            "auth",
        ),
        (
            json!({"name": "v", "provider": "vertex", "base_url": "https://us-central1-aiplatform.googleapis.com", "auth": "workload"}),
            "auth",
        ),
        (
            json!({"name": "a", "provider": "azure", "base_url": "https://r.openai.azure.com", "auth": "pod"}),
            "auth",
        ),
    ] {
        expect_invalid(&app, Method::POST, path, body, field).await;
    }
    // A channel with a stored credential cannot turn to its workload identity.
    let keyed = app
        .post(path, json!({"name": "azure-key", "provider": "azure", "base_url": "https://r.openai.azure.com"}))
        .await;
    let keyed = keyed.body["id"].as_i64().unwrap();
    let added = app
        .post(
            &format!("{path}/{keyed}/credentials"),
            json!({"secret": "azure-key-0001"}),
        )
        .await;
    assert_eq!(added.status, StatusCode::CREATED, "{}", added.text);
    expect_invalid(
        &app,
        Method::PATCH,
        &format!("{path}/{keyed}"),
        json!({"auth": "workload"}),
        "auth",
    )
    .await;
    let vertex = app
        .post(
            path,
            json!({"name": "vertex-gke", "provider": "vertex", "auth": "workload",
                   "base_url": "https://us-central1-aiplatform.googleapis.com/v1/projects/p1/locations/us-central1"}),
        )
        .await;
    assert_eq!(vertex.status, StatusCode::CREATED, "{}", vertex.text);
}

/// The snapshot as a proxy without a fleet token receives it.
fn control_plane_withhold(wire: &mut switchyard_proto::v1::Snapshot) {
    switchyard_control_plane::publisher::withhold_secrets(wire);
}

/// Pass-through patterns: a create's list reads back and reaches the snapshot (and its wire
/// form), a patch replaces it, and a bad pattern, a duplicate, too many or any on a `mock`
/// channel is a 422 naming the field.
#[sqlx::test(migrations = "../migrations")]
async fn pass_through_patterns_reach_the_snapshot_and_bad_ones_are_refused(pool: PgPool) {
    let app = test_app(pool);
    let path = "/api/v1/channels";
    let created = app
        .post(
            path,
            json!({"name": "oa", "provider": "openai", "base_url": "https://api.openai.test/v1",
                   "passthrough": ["/v1/fine_tuning/*", "/v1/files"]}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(
        created.body["passthrough"],
        json!(["/v1/fine_tuning/*", "/v1/files"])
    );
    let channel = created.body["id"].as_i64().unwrap();
    let plain = app
        .post(
            path,
            json!({"name": "plain", "provider": "openai", "base_url": "https://x.test/v1"}),
        )
        .await;
    assert_eq!(plain.body["passthrough"], json!([]), "none by default");

    for snapshot in &published(&app).await {
        let ch = snapshot.channel(channel).unwrap();
        assert_eq!(ch.passthrough, vec!["/v1/fine_tuning/*", "/v1/files"]);
    }

    let patched = app
        .patch(
            &format!("{path}/{channel}"),
            json!({"passthrough": ["/v1/batches*"]}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["passthrough"], json!(["/v1/batches*"]));
    assert_eq!(
        app.get(&format!("{path}/{channel}")).await.body["passthrough"],
        json!(["/v1/batches*"])
    );

    let too_many: Vec<String> = (0..=64).map(|i| format!("/p{i}")).collect();
    for (list, param) in [
        (json!(["v1/files"]), "passthrough[0]"),
        (json!(["/v1/files", "/v1/../admin"]), "passthrough[1]"),
        (json!(["/v1/files", "/v1/files"]), "passthrough[1]"),
        (json!(["/v1/a b"]), "passthrough[0]"),
        (json!(too_many), "passthrough"),
    ] {
        expect_invalid(
            &app,
            Method::PATCH,
            &format!("{path}/{channel}"),
            json!({"passthrough": list}),
            param,
        )
        .await;
    }
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"name": "sim", "provider": "mock", "passthrough": ["/*"]}),
        "passthrough",
    )
    .await;
}

/// A channel from a provider preset: `preset: groq` gives OpenAI's protocol at Groq's URL without
/// the Responses API, the snapshot carries the preset and prices the channel's usage from the
/// catalog (the operator's own price winning); what the body gives wins over the preset; an
/// unknown preset is a 422 naming `preset` and listing the known ones; `/api/v1/presets` lists
/// them with their prices; an export writes the preset, not what it supplies.
#[sqlx::test(migrations = "../migrations")]
async fn a_channel_from_a_preset_gets_its_protocol_url_and_catalog_prices(pool: PgPool) {
    let app = test_app(pool);
    let path = "/api/v1/channels";
    let created = app
        .post(path, json!({"name": "groq", "preset": "groq"}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["preset"], "groq");
    assert_eq!(created.body["provider"], "openai");
    assert_eq!(created.body["base_url"], "https://api.groq.com/openai/v1");
    assert_eq!(created.body["responses_api"], false);
    let groq = created.body["id"].as_i64().unwrap();
    let own = app
        .post(
            path,
            json!({"name": "vllm", "preset": "vllm", "base_url": "http://gpu.test:8000/v1",
                   "responses_api": true}),
        )
        .await;
    assert_eq!(own.status, StatusCode::CREATED, "{}", own.text);
    assert_eq!(own.body["base_url"], "http://gpu.test:8000/v1");
    assert_eq!(own.body["responses_api"], true);

    let reply = app
        .send(
            Method::POST,
            path,
            Some(json!({"name": "x", "preset": "groq-cloud"})),
            Some(ADMIN_TOKEN),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert_eq!(reply.param(), Some("preset"));
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("groq-cloud") && message.contains("groq, together"),
        "{message}"
    );
    expect_invalid(&app, Method::POST, path, json!({"name": "y"}), "provider").await;

    // The catalog prices Groq's gpt-oss-120b at 0.15 USD in, 0.075 cached, 0.60 out.
    for snapshot in &published(&app).await {
        assert_eq!(
            snapshot.channel(groq).unwrap().preset.as_deref(),
            Some("groq")
        );
        let (price, catalog) = snapshot.priced(groq, "openai/gpt-oss-120b").unwrap();
        assert!(catalog);
        assert_eq!(
            (
                price.input_per_million,
                price.cached_input_per_million,
                price.output_per_million
            ),
            (150_000, Some(75_000), 600_000)
        );
        assert!(
            snapshot.price(groq, "llama-unknown").is_none(),
            "unpriced as before"
        );
    }
    let price = app
        .post(
            "/api/v1/prices",
            json!({"channel_id": groq, "model_pattern": "*", "input_per_million": "1",
                   "output_per_million": "2"}),
        )
        .await;
    assert_eq!(price.status, StatusCode::CREATED, "{}", price.text);
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let (price, catalog) = snapshot.priced(groq, "openai/gpt-oss-120b").unwrap();
    assert!(!catalog, "the operator's price wins");
    assert_eq!(price.input_per_million, 1_000_000);

    let presets = app.get("/api/v1/presets").await;
    assert_eq!(presets.status, StatusCode::OK, "{}", presets.text);
    let list = presets.body["presets"].as_array().unwrap();
    let groq_preset = list.iter().find(|p| p["name"] == "groq").unwrap();
    assert_eq!(groq_preset["base_url"], "https://api.groq.com/openai/v1");
    assert_eq!(groq_preset["prices"][0]["input_per_million"], "0.15");
    assert!(groq_preset["prices"][0]["source"]
        .as_str()
        .unwrap()
        .starts_with("https://"));
    assert!(list
        .iter()
        .any(|p| p["name"] == "ollama" && p["auth"] == "none"));

    let export = app.get("/api/v1/config").await;
    assert!(
        export.text.contains("- name: groq\n  preset: groq\n"),
        "{}",
        export.text
    );
    assert!(!export.text.contains("api.groq.com"), "{}", export.text);
    assert!(export
        .text
        .contains("preset: vllm\n  base_url: http://gpu.test:8000/v1\n"));
}

/// The configuration file names channels by preset too: an apply stores what the preset
/// supplies (and the preset), the snapshot has it, and planning the same file again changes
/// nothing; an unknown preset is a 422 whose `param` is its path in the file.
#[sqlx::test(migrations = "../migrations")]
async fn a_configuration_file_applies_a_preset_and_plans_it_unchanged(pool: PgPool) {
    let app = test_app(pool);
    let file = "channels:\n- name: local\n  preset: ollama\n- name: ds\n  preset: deepseek\n  credentials: [\"${DEEPSEEK_API_KEY}\"]\n";
    let (status, body) = post_yaml(&app, "/api/v1/config/apply", file).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let channels = app.get("/api/v1/channels").await.body["data"].clone();
    let local = channels
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "local")
        .unwrap();
    assert_eq!(local["preset"], "ollama");
    assert_eq!(local["provider"], "openai");
    assert_eq!(local["base_url"], "http://127.0.0.1:11434/v1");
    assert_eq!(local["responses_api"], false);
    let (status, plan) = post_yaml(&app, "/api/v1/config/plan", file).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["changes"], json!([]), "{plan}");
    // An override of what the preset supplies is planned from the preset's value.
    let own = file.replace(
        "  preset: ollama\n",
        "  preset: ollama\n  responses_api: true\n  base_url: http://gpu.test:11434/v1\n",
    );
    let (status, plan) = post_yaml(&app, "/api/v1/config/plan", &own).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let fields = &plan["changes"][0]["fields"];
    assert_eq!(
        fields,
        &json!([
            {"field": "base_url", "before": "http://127.0.0.1:11434/v1",
             "after": "http://gpu.test:11434/v1"},
            {"field": "responses_api", "before": false, "after": true}
        ]),
        "{plan}"
    );
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let id = local["id"].as_i64().unwrap();
    // A local server needs no key: the snapshot gives it the placeholder the proxy sends.
    assert_eq!(snapshot.channel(id).unwrap().credentials.len(), 1);
    let ds = channels
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ds")
        .unwrap();
    assert!(snapshot
        .price(ds["id"].as_i64().unwrap(), "deepseek-chat")
        .is_some());

    let (status, body) = post_yaml(
        &app,
        "/api/v1/config/plan",
        &file.replace("preset: deepseek", "preset: deep-seek"),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["param"], "channels[1].preset", "{body}");
}

/// Posts a YAML body (a configuration file): (status, JSON answer).
async fn post_yaml(app: &TestApp, path: &str, yaml: &str) -> (StatusCode, serde_json::Value) {
    let reply = app.post_yaml(path, yaml, ADMIN_TOKEN).await;
    (reply.status, reply.body)
}

/// A Vertex AI channel: its base URL checked, its credential a service-account key file that is
/// checked on create and patch (a precise 422 naming the field, never quoting the key), read back
/// masked, and in the snapshot the proxies receive (the encoded bytes included) as `vertex`.
#[sqlx::test(migrations = "../migrations")]
async fn a_vertex_channel_takes_a_checked_service_account_key(pool: PgPool) {
    use switchyard_mock_upstream::vertex;
    let app = test_app(pool);
    let created = app
        .post(
            "/api/v1/channels",
            json!({"name": "vertex-us", "provider": "vertex",
                   "base_url": "https://us-central1-aiplatform.googleapis.com"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["provider"], "vertex");
    let channel = created.body["id"].as_i64().unwrap();
    // As Google hands it out: pretty-printed JSON, on several lines.
    let key: serde_json::Value = serde_json::from_str(&vertex::service_account_json(
        "https://oauth2.googleapis.com/token",
        vertex::TEST_PRIVATE_KEY_PEM,
    ))
    .unwrap();
    let key_file = serde_json::to_string_pretty(&key).unwrap();
    let path = format!("/api/v1/channels/{channel}/credentials");
    let credential = app.post(&path, json!({"secret": key_file})).await;
    assert_eq!(
        credential.status,
        StatusCode::CREATED,
        "{}",
        credential.text
    );
    assert_eq!(credential.body["source"], "inline");
    let masked = credential.body["secret"].as_str().unwrap();
    assert!(masked.starts_with("****"), "{masked}");
    let id = credential.body["id"].as_i64().unwrap();
    for read in [
        app.get(&path).await.text,
        app.get(&format!("/api/v1/credentials/{id}")).await.text,
        app.get("/api/v1/audit?resource=credential").await.text,
    ] {
        assert!(
            !read.contains("PRIVATE KEY") && !read.contains("MII"),
            "{read}"
        );
    }
    let route = app.route("gemini-pro").await;
    app.member(
        route,
        json!({"channel_id": channel, "upstream_model": "gemini-2.5-pro"}),
    )
    .await;

    for snapshot in &published(&app).await {
        let ch = snapshot.channel(channel).unwrap();
        assert_eq!(ch.provider, switchyard_engine::Provider::Vertex);
        assert_eq!(ch.base_url, "https://us-central1-aiplatform.googleapis.com");
        let switchyard_engine::SecretSource::Inline(secret) = &ch.credentials[0].secret else {
            panic!("inline");
        };
        assert_eq!(secret, key_file.trim(), "the proxies get the key file");
    }

    // Bad key files: the field at fault, never the key.
    let with = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut key = key.clone();
        edit(&mut key);
        json!({"secret": key.to_string()})
    };
    for (body, expected) in [
        (json!({"secret": "sk-SECRET-not-json"}), "not JSON"),
        (
            with(&|k| {
                k.as_object_mut().unwrap().remove("client_email");
            }),
            "`client_email` is missing",
        ),
        (
            with(&|k| k["type"] = json!("authorized_user")),
            "`type` must be \"service_account\"",
        ),
        (
            with(&|k| {
                k["private_key"] =
                    json!("-----BEGIN PRIVATE KEY-----\nSECRET\n-----END PRIVATE KEY-----\n")
            }),
            "`private_key` is not",
        ),
    ] {
        let reply = app.post(&path, body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.param(), Some("secret"), "{}", reply.text);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{message}");
        assert!(
            !message.contains("SECRET") && !message.contains("MII"),
            "{message}"
        );
    }
    // Patching in a bad one is refused the same way; an env reference is resolved by the
    // proxies (checked there).
    expect_invalid(
        &app,
        Method::PATCH,
        &format!("/api/v1/credentials/{id}"),
        json!({"secret": "{}"}),
        "secret",
    )
    .await;
    let env = app.post(&path, json!({"secret_env": "VERTEX_KEY"})).await;
    assert_eq!(env.status, StatusCode::CREATED, "{}", env.text);
    // A one-line key is still a single-line secret for other providers, and a key file is not.
    let other = app.channel("plain").await;
    let reply = app
        .post(
            &format!("/api/v1/channels/{other}/credentials"),
            json!({"secret": key_file}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );

    // The base URL: the endpoint, or the endpoint with a project and location.
    let channels = "/api/v1/channels";
    let body = |url: &str| json!({"name": format!("v-{}", url.len()), "provider": "vertex", "base_url": url});
    let reply = app
        .post(
            channels,
            body("https://aiplatform.googleapis.com/v1/projects/p-1/locations/global"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    expect_invalid(
        &app,
        Method::POST,
        channels,
        body("https://aiplatform.googleapis.com/v1/projects/p-1"),
        "base_url",
    )
    .await;
}

/// An AWS Bedrock channel: its base URL checked, its credential an AWS access key (JSON) checked
/// on create and patch (a precise 422 naming the field, never quoting the secret), read back
/// masked, and in the snapshot the proxies receive (the encoded bytes included) as `bedrock`.
#[sqlx::test(migrations = "../migrations")]
async fn a_bedrock_channel_takes_a_checked_access_key(pool: PgPool) {
    let app = test_app(pool);
    let created = app
        .post(
            "/api/v1/channels",
            json!({"name": "bedrock-us", "provider": "bedrock",
                   "base_url": "https://bedrock-runtime.us-west-2.amazonaws.com"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["provider"], "bedrock");
    let channel = created.body["id"].as_i64().unwrap();
    let key = json!({
        "access_key_id": "AKIAIOSFODNN7EXAMPLE",
        "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY",
        "session_token": "FwoGZXIvYXdzEXAMPLETOKEN",
    })
    .to_string();
    let path = format!("/api/v1/channels/{channel}/credentials");
    let credential = app.post(&path, json!({"secret": key})).await;
    assert_eq!(
        credential.status,
        StatusCode::CREATED,
        "{}",
        credential.text
    );
    let masked = credential.body["secret"].as_str().unwrap();
    assert!(masked.starts_with("****"), "{masked}");
    let id = credential.body["id"].as_i64().unwrap();
    for read in [
        app.get(&path).await.text,
        app.get(&format!("/api/v1/credentials/{id}")).await.text,
        app.get("/api/v1/audit?resource=credential").await.text,
    ] {
        assert!(
            !read.contains("SECRETKEY") && !read.contains("EXAMPLETOKEN"),
            "{read}"
        );
    }
    let route = app.route("claude-haiku").await;
    app.member(
        route,
        json!({"channel_id": channel, "upstream_model": "anthropic.claude-3-5-haiku-20241022-v1:0"}),
    )
    .await;

    for snapshot in &published(&app).await {
        let ch = snapshot.channel(channel).unwrap();
        assert_eq!(ch.provider, switchyard_engine::Provider::Bedrock);
        assert_eq!(
            ch.base_url,
            "https://bedrock-runtime.us-west-2.amazonaws.com"
        );
        let switchyard_engine::SecretSource::Inline(secret) = &ch.credentials[0].secret else {
            panic!("inline");
        };
        assert_eq!(secret, &key, "the proxies get the access key");
    }

    // Bad credentials: the field at fault, never the secret.
    for (body, expected) in [
        (
            json!({"secret": "AKIAIOSFODNN7EXAMPLE:SECRETKEY"}),
            "JSON object",
        ),
        (
            json!({"secret": json!({"secret_access_key": "SECRETKEY"}).to_string()}),
            "no access_key_id",
        ),
        (
            json!({"secret": json!({"access_key_id": "AKIAIOSFODNN7EXAMPLE"}).to_string()}),
            "no secret_access_key",
        ),
        (
            json!({"secret": json!({"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "SECRET KEY"}).to_string()}),
            "secret_access_key must be",
        ),
        (
            json!({"secret": json!({"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "SECRETKEY", "region": "Mars 1"}).to_string()}),
            "region must be",
        ),
    ] {
        let reply = app.post(&path, body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.param(), Some("secret"), "{}", reply.text);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{message}");
        assert!(!message.contains("SECRET"), "{message}");
    }
    expect_invalid(
        &app,
        Method::PATCH,
        &format!("/api/v1/credentials/{id}"),
        json!({"secret": "{}"}),
        "secret",
    )
    .await;
    let env = app.post(&path, json!({"secret_env": "BEDROCK_KEY"})).await;
    assert_eq!(env.status, StatusCode::CREATED, "{}", env.text);

    // The base URL: a Bedrock Runtime endpoint on AWS; any other host as it is.
    let channels = "/api/v1/channels";
    let body = |url: &str| json!({"name": format!("b-{}", url.len()), "provider": "bedrock", "base_url": url});
    let reply = app
        .post(channels, body("https://bedrock-proxy.internal.example"))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    for bad in [
        "https://bedrock.us-east-1.amazonaws.com",
        "https://bedrock-runtime.us-east-1.amazonaws.com/model",
    ] {
        expect_invalid(&app, Method::POST, channels, body(bad), "base_url").await;
    }
}

/// The snapshot the publisher holds after `app`'s writes, as compiled and as a proxy decodes it
/// from the encoded bytes it is sent.
async fn published(app: &TestApp) -> [switchyard_engine::Snapshot; 2] {
    app.refresh().await;
    let published = app.publisher.current().unwrap();
    let wire =
        <switchyard_proto::v1::Snapshot as prost::Message>::decode(published.encoded.clone())
            .unwrap();
    let decoded = switchyard_proto::snapshot_from_proto(wire).unwrap();
    [(*published.snapshot).clone(), decoded]
}

async fn expect_invalid(
    app: &TestApp,
    method: Method,
    path: &str,
    body: serde_json::Value,
    param: &str,
) {
    let reply = app
        .send(method, path, Some(body.clone()), Some(ADMIN_TOKEN))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{path} {body}: {}",
        reply.text
    );
    assert_eq!(reply.param(), Some(param), "{}", reply.text);
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(param.split(['[', '.']).next().unwrap()),
        "{}",
        reply.text
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn channel_validation_names_the_field(pool: PgPool) {
    let app = test_app(pool);
    let base = || json!({"name": "c", "provider": "openai", "base_url": "https://x.test"});
    let with = |key: &str, value: serde_json::Value| {
        let mut body = base();
        body[key] = value;
        body
    };
    let path = "/api/v1/channels";
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("provider", json!("azure-openai")),
        "provider",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("base_url", json!("ftp://x")),
        "base_url",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("status", json!("auto_disabled")),
        "status",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("status", json!("paused")),
        "status",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("max_concurrency", json!(0)),
        "max_concurrency",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("retry_status_codes", json!([200, 99])),
        "retry_status_codes[1]",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("capabilities", json!({"max_context": 0})),
        "capabilities.max_context",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("max_concurrency", json!("many")),
        "max_concurrency",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        with("colour", json!("red")),
        "colour",
    )
    .await;
    expect_invalid(&app, Method::POST, path, with("name", json!("  ")), "name").await;

    // Malformed JSON, or a body that is not an object, is a 400.
    let reply = app.send(Method::POST, path, None, Some(ADMIN_TOKEN)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let reply = app.post(path, json!(null)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    let reply = app.post(path, json!([1])).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);

    // Duplicate names are rejected, naming the field.
    app.channel("dup").await;
    expect_invalid(&app, Method::POST, path, with("name", json!("dup")), "name").await;
    // Nothing invalid was written or audited.
    assert_eq!(app.audit_rows().await, 1);
}

#[sqlx::test(migrations = "../migrations")]
async fn channel_in_use_cannot_be_deleted(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("c").await;
    let route = app.route("gpt-4o").await;
    let member = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o"}),
        )
        .await;
    let reply = app.delete(&format!("/api/v1/channels/{channel}")).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text);
    assert_eq!(
        app.delete(&format!("/api/v1/members/{member}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.delete(&format!("/api/v1/channels/{channel}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
}

// ------------------------------------------------------------------------------ credentials

#[sqlx::test(migrations = "../migrations")]
async fn credential_secrets_are_write_only(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("c").await;
    let secret = "sk-live-abcdefghijklmnop1234";
    let created = app
        .post(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret": secret}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["secret"], "****1234");
    assert_eq!(created.body["source"], "inline");
    assert!(!created.text.contains(secret));
    let id = created.body["id"].as_i64().unwrap();

    let env = app
        .create(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret_env": "OPENAI_KEY_2", "enabled": false}),
        )
        .await;

    let list = app
        .get(&format!("/api/v1/channels/{channel}/credentials"))
        .await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2);
    assert!(!list.text.contains(secret));
    let audit = app.get("/api/v1/audit?resource=credential").await;
    assert!(!audit.text.contains(secret), "{}", audit.text);

    // Switching an inline secret to an env reference.
    let patched = app
        .patch(
            &format!("/api/v1/credentials/{id}"),
            json!({"secret_env": "KEY_A"}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["source"], "env");
    assert_eq!(patched.body["secret"], json!(null));

    let path = format!("/api/v1/channels/{channel}/credentials");
    expect_invalid(&app, Method::POST, &path, json!({}), "secret").await;
    expect_invalid(
        &app,
        Method::POST,
        &path,
        json!({"secret": "a", "secret_env": "B"}),
        "secret",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        &path,
        json!({"secret_env": "1-bad"}),
        "secret_env",
    )
    .await;
    assert_eq!(
        app.post("/api/v1/channels/999/credentials", json!({"secret": "x"}))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.delete(&format!("/api/v1/credentials/{env}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/credentials/{env}")).await.status,
        StatusCode::NOT_FOUND
    );
}

// ----------------------------------------------------------------------- routes and members

#[sqlx::test(migrations = "../migrations")]
async fn route_crud_and_validation(pool: PgPool) {
    let app = test_app(pool);
    let created = app
        .post(
            "/api/v1/routes",
            json!({"model_pattern": "gpt-4*", "routing_mode": "weighted", "sticky_session": false,
                   "retry_times": 3, "cooldown_seconds": 60}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let id = created.body["id"].as_i64().unwrap();
    assert_eq!(created.body["sticky_session"], false);
    assert_eq!(created.body["stable_first"], json!(null));

    let path = "/api/v1/routes";
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": "gpt-4*"}),
        "model_pattern",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": "gpt**"}),
        "model_pattern",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": " gpt"}),
        "model_pattern",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": "a", "routing_mode": "random"}),
        "routing_mode",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": "a", "retry_times": 101}),
        "retry_times",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": "a", "channel_retry_times": 6}),
        "channel_retry_times",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": "a", "stable_first_denominator": 1}),
        "stable_first_denominator",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": "a", "cooldown_seconds": -1}),
        "cooldown_seconds",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        path,
        json!({"model_pattern": "a", "routing_mode": "single"}),
        "single_member_id",
    )
    .await;

    // Overrides clear with null; other fields stay.
    let patched = app
        .patch(
            &format!("/api/v1/routes/{id}"),
            json!({"retry_times": null, "enabled": false}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["retry_times"], json!(null));
    assert_eq!(patched.body["cooldown_seconds"], 60);
    assert_eq!(patched.body["enabled"], false);

    // Single mode needs a member of this very route.
    let channel = app.channel("c").await;
    let other = app.route("other").await;
    let foreign = app
        .member(other, json!({"channel_id": channel, "upstream_model": "m"}))
        .await;
    let own = app
        .member(
            id,
            json!({"channel_id": channel, "upstream_model": "gpt-4o"}),
        )
        .await;
    expect_invalid(
        &app,
        Method::PATCH,
        &format!("/api/v1/routes/{id}"),
        json!({"routing_mode": "single", "single_member_id": foreign}),
        "single_member_id",
    )
    .await;
    let single = app
        .patch(
            &format!("/api/v1/routes/{id}"),
            json!({"routing_mode": "single", "single_member_id": own}),
        )
        .await;
    assert_eq!(single.status, StatusCode::OK, "{}", single.text);
    // Deleting the single member clears the pin (the route behaves as auto).
    assert_eq!(
        app.delete(&format!("/api/v1/members/{own}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/routes/{id}")).await.body["single_member_id"],
        json!(null)
    );

    // Deleting a route deletes its members.
    assert_eq!(
        app.delete(&format!("/api/v1/routes/{other}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/members/{foreign}")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn member_crud_and_validation(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("c").await;
    let route = app.route("gpt-4o").await;
    let created = app
        .post(
            &format!("/api/v1/routes/{route}/members"),
            json!({"channel_id": channel, "upstream_model": "gpt-4o", "group_name": "  batch ",
                   "priority": 10, "weight": 3, "canary": true}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(
        created.body["group_name"], "batch",
        "group names are trimmed"
    );
    let id = created.body["id"].as_i64().unwrap();
    let defaulted = app
        .post(
            &format!("/api/v1/routes/{route}/members"),
            json!({"channel_id": channel, "upstream_model": "m", "group_name": ""}),
        )
        .await;
    assert_eq!(defaulted.body["group_name"], "default");
    assert_eq!(defaulted.body["weight"], 1);

    let path = format!("/api/v1/routes/{route}/members");
    expect_invalid(
        &app,
        Method::POST,
        &path,
        json!({"channel_id": 999, "upstream_model": "m"}),
        "channel_id",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        &path,
        json!({"channel_id": channel, "upstream_model": "m", "weight": -1}),
        "weight",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        &path,
        json!({"channel_id": channel, "upstream_model": ""}),
        "upstream_model",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        &path,
        json!({"channel_id": channel, "upstream_model": "m", "group_name": "g".repeat(65)}),
        "group_name",
    )
    .await;
    assert_eq!(
        app.post(
            "/api/v1/routes/999/members",
            json!({"channel_id": channel, "upstream_model": "m"})
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );

    let patched = app
        .patch(
            &format!("/api/v1/members/{id}"),
            json!({"weight": 0, "enabled": false}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["weight"], 0);
    assert_eq!(patched.body["priority"], 10);

    let list = app.get(&format!("/api/v1/routes/{route}/members")).await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2);
}

// ---------------------------------------------------------------------------- tokens, teams

#[sqlx::test(migrations = "../migrations")]
async fn token_plaintext_is_returned_once_and_stored_hashed(pool: PgPool) {
    let app = test_app(pool);
    let created = app
        .post(
            "/api/v1/tokens",
            json!({"name": "ci", "route_group_name": "batch", "allow_pinning": true}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let plaintext = created.body["token"].as_str().unwrap().to_owned();
    assert!(plaintext.starts_with("sk-sy-"));
    let id = created.body["id"].as_i64().unwrap();

    let stored: String = sqlx::query_scalar("SELECT hash FROM tokens WHERE id = $1")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        stored,
        switchyard_control_plane::api::token_hash(&plaintext)
    );
    assert_ne!(stored, plaintext);

    let got = app.get(&format!("/api/v1/tokens/{id}")).await;
    assert!(got.body.get("token").is_none());
    assert!(!got.text.contains(&plaintext));
    assert!(!app.get("/api/v1/tokens").await.text.contains(&plaintext));
    assert!(!app.get("/api/v1/audit").await.text.contains(&plaintext));

    expect_invalid(
        &app,
        Method::POST,
        "/api/v1/tokens",
        json!({"name": "x", "team_id": 42}),
        "team_id",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        "/api/v1/tokens",
        json!({"name": "x", "route_group_name": "g".repeat(65)}),
        "route_group_name",
    )
    .await;
    let patched = app
        .patch(
            &format!("/api/v1/tokens/{id}"),
            json!({"route_group_name": null, "enabled": false}),
        )
        .await;
    assert_eq!(patched.body["route_group_name"], json!(null));
    assert_eq!(patched.body["enabled"], false);
}

#[sqlx::test(migrations = "../migrations")]
async fn team_crud_and_grant_integrity(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("c").await;
    let route = app.route("gpt-4o").await;
    let m1 = app
        .member(route, json!({"channel_id": channel, "upstream_model": "a"}))
        .await;
    let m2 = app
        .member(route, json!({"channel_id": channel, "upstream_model": "b"}))
        .await;
    let created = app
        .post(
            "/api/v1/teams",
            json!({"name": "research", "models": ["gpt-4*"], "members": [m1],
                   "plan": {m2.to_string(): {"priority": 5, "weight": 2}}, "retry_limit": 1}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let team = created.body["id"].as_i64().unwrap();
    assert_eq!(created.body["members"], json!([m1]));
    assert_eq!(created.body["plan"][m2.to_string()]["weight"], 2);

    expect_invalid(
        &app,
        Method::POST,
        "/api/v1/teams",
        json!({"name": "t", "models": ["a**"]}),
        "models[0]",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        "/api/v1/teams",
        json!({"name": "t", "members": [999]}),
        "members[0]",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        "/api/v1/teams",
        json!({"name": "t", "plan": {"999": {"weight": 1}}}),
        "plan.999",
    )
    .await;
    expect_invalid(
        &app,
        Method::POST,
        "/api/v1/teams",
        json!({"name": "t", "retry_limit": 101}),
        "retry_limit",
    )
    .await;

    // A granted member cannot silently disappear (the team would be widened to every member).
    assert_eq!(
        app.delete(&format!("/api/v1/members/{m1}")).await.status,
        StatusCode::CONFLICT
    );
    // A team with tokens cannot be deleted (the tokens would lose their restrictions).
    let token = app
        .create("/api/v1/tokens", json!({"name": "t", "team_id": team}))
        .await;
    assert_eq!(
        app.delete(&format!("/api/v1/teams/{team}")).await.status,
        StatusCode::CONFLICT
    );

    let patched = app
        .patch(
            &format!("/api/v1/teams/{team}"),
            json!({"members": [], "disable_failover": true}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["members"], json!([]));
    assert_eq!(patched.body["models"], json!(["gpt-4*"]));
    assert_eq!(
        app.delete(&format!("/api/v1/members/{m1}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.delete(&format!("/api/v1/tokens/{token}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.delete(&format!("/api/v1/teams/{team}")).await.status,
        StatusCode::NO_CONTENT
    );
}

// -------------------------------------------------------------------------------- settings

#[sqlx::test(migrations = "../migrations")]
async fn settings_get_put_patch_with_ranges(pool: PgPool) {
    let app = test_app(pool);
    let got = app.get("/api/v1/settings").await;
    assert_eq!(got.body["retry_times"], 2);
    assert_eq!(got.body["max_request_body_bytes"], 33554432);

    let patched = app
        .patch(
            "/api/v1/settings",
            json!({"retry_times": 5, "sticky_enabled": true}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["retry_times"], 5);
    assert_eq!(patched.body["cooldown_seconds"], 30);

    let patched = app
        .patch("/api/v1/settings", json!({"cooldown_seconds": 10}))
        .await;
    assert_eq!(
        patched.body["retry_times"], 5,
        "PATCH keeps earlier changes"
    );

    let put = app
        .put("/api/v1/settings", json!({"channel_retry_times": 0}))
        .await;
    assert_eq!(put.status, StatusCode::OK);
    assert_eq!(
        put.body["retry_times"], 2,
        "PUT resets absent keys to defaults"
    );
    assert_eq!(put.body["channel_retry_times"], 0);

    expect_invalid(
        &app,
        Method::PATCH,
        "/api/v1/settings",
        json!({"retry_times": 101}),
        "retry_times",
    )
    .await;
    expect_invalid(
        &app,
        Method::PATCH,
        "/api/v1/settings",
        json!({"sticky_ttl_minutes": 0}),
        "sticky_ttl_minutes",
    )
    .await;
    expect_invalid(
        &app,
        Method::PATCH,
        "/api/v1/settings",
        json!({"retry_timez": 1}),
        "retry_timez",
    )
    .await;
    expect_invalid(
        &app,
        Method::PATCH,
        "/api/v1/settings",
        json!({"sticky_enabled": "yes"}),
        "sticky_enabled",
    )
    .await;
    assert_eq!(
        app.get("/api/v1/settings").await.body["channel_retry_times"],
        0
    );
}

// ------------------------------------------------------------------- audit, revision, paging

#[sqlx::test(migrations = "../migrations")]
async fn every_write_is_audited_and_bumps_the_revision(pool: PgPool) {
    let app = test_app(pool);
    let start = app.revision().await;
    let reply = app
        .send(
            Method::POST,
            "/api/v1/channels",
            Some(json!({"name": "c", "provider": "mock"})),
            Some(ADMIN_TOKEN),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let channel = reply.body["id"].as_i64().unwrap();
    assert_eq!(reply.revision(), Some(start + 1));
    let route = app.route("m").await;
    app.member(route, json!({"channel_id": channel, "upstream_model": "m"}))
        .await;
    app.patch("/api/v1/settings", json!({"retry_times": 3}))
        .await;
    app.delete(&format!("/api/v1/routes/{route}")).await;
    assert_eq!(app.revision().await, start + 5);

    let audit = app.get("/api/v1/audit").await;
    let rows = audit.body["data"].as_array().unwrap();
    let summary: Vec<(String, String, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap().to_owned(),
                r["resource"].as_str().unwrap().to_owned(),
                r["revision"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("create".into(), "channel".into(), start + 1),
            ("create".into(), "route".into(), start + 2),
            ("create".into(), "member".into(), start + 3),
            ("update".into(), "settings".into(), start + 4),
            ("delete".into(), "route".into(), start + 5),
        ]
    );
    // The bootstrap token (`SWITCHYARD_ADMIN_TOKEN`) is named `bootstrap`.
    assert!(rows.iter().all(|r| r["actor"] == "bootstrap"));

    // The actor header adds a note to the token's name; it never replaces it.
    let named = app
        .send_with_actor(
            "/api/v1/routes",
            json!({"model_pattern": "n"}),
            "alice@console",
        )
        .await;
    assert_eq!(named, StatusCode::CREATED);
    let last = app.get("/api/v1/audit?resource=route").await;
    let last = last.body["data"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["actor"], "bootstrap (alice@console)");

    // A failed write is not audited and does not bump the revision.
    let before = (app.revision().await, app.audit_rows().await);
    app.post("/api/v1/routes", json!({"model_pattern": "n"}))
        .await;
    assert_eq!((app.revision().await, app.audit_rows().await), before);
}

#[sqlx::test(migrations = "../migrations")]
async fn lists_page_with_limit_and_cursor(pool: PgPool) {
    let app = test_app(pool);
    for i in 0..5 {
        app.route(&format!("model-{i}")).await;
    }
    let first = app.get("/api/v1/routes?limit=2").await;
    assert_eq!(first.body["data"].as_array().unwrap().len(), 2);
    let cursor = first.body["next_cursor"].as_str().unwrap().to_owned();
    let second = app
        .get(&format!("/api/v1/routes?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(second.body["data"][0]["model_pattern"], "model-2");
    let cursor = second.body["next_cursor"].as_str().unwrap().to_owned();
    let last = app
        .get(&format!("/api/v1/routes?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(last.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(last.body["next_cursor"], json!(null));

    assert_eq!(
        app.get("/api/v1/routes?limit=0").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        app.get("/api/v1/routes?limit=501").await.status,
        StatusCode::BAD_REQUEST
    );
    let bad = app.get("/api/v1/routes?cursor=abc").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.param(), Some("cursor"));
}

#[sqlx::test(migrations = "../migrations")]
async fn state_reports_no_shared_state_yet(pool: PgPool) {
    let app = test_app(pool);
    let state = app.get("/api/v1/state").await;
    assert_eq!(state.status, StatusCode::OK);
    assert_eq!(state.body["configured"], false);
}
