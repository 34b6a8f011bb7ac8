//! The semantic part of cache rules on the control plane: validated with the field named (the
//! threshold's range, an unknown channel, the mode), shown in the rule's view and removed with
//! `null`; the trial report (zeros and nulls before any report, the proxies' counts summed
//! after, 409 for a rule without a semantic part, 404 for no rule); explain's score of a prompt
//! against the rule's shared vectors in Redis, and its word when there is no Redis.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::StatusCode;
use common::{test_app, test_app_with_live};
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::live::LiveState;
use switchyard_control_plane::usage::apply_batch;
use switchyard_engine::semantic::{normalise, SemanticEntry};
use switchyard_mock_upstream::{sim, MockUpstream};
use switchyard_proto::v1;
use switchyard_state::cache::{RedisCache, ResponseCache};

/// A control plane with a route `gpt-*` and an OpenAI channel at `base_url` (the embeddings
/// channel): (app, channel id).
async fn with_channel(app: common::TestApp, base_url: &str) -> (common::TestApp, i64) {
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": "embedder", "provider": "openai", "base_url": base_url}),
        )
        .await;
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret": "sk-embed"}),
    )
    .await;
    let route = app.route("gpt-*").await;
    app.member(route, json!({"channel_id": channel, "upstream_model": "m"}))
        .await;
    (app, channel)
}

fn rule(channel: Value, threshold: Value, mode: &str) -> Value {
    json!({"name": "sem", "model_pattern": "gpt-*", "endpoints": ["chat_completions"],
           "ttl_seconds": 60, "semantic": {"channel": channel, "model": "embed-model",
           "threshold": threshold, "mode": mode}})
}

#[sqlx::test(migrations = "../migrations")]
async fn a_semantic_part_is_validated_shown_and_removed(pool: PgPool) {
    let (app, channel) = with_channel(test_app(pool), "http://127.0.0.1:9").await;
    for (body, field) in [
        (
            rule(json!(channel), json!(1.5), "trial"),
            "semantic.threshold",
        ),
        (
            rule(json!(channel), json!(0), "trial"),
            "semantic.threshold",
        ),
        (
            rule(json!(999_999), json!(0.9), "trial"),
            "semantic.channel",
        ),
        (rule(json!(channel), json!(0.9), "always"), "semantic.mode"),
    ] {
        let reply = app.post("/api/v1/cache_rules", body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.param(), Some(field), "{}", reply.text);
        assert!(reply.text.contains(field), "{}", reply.text);
    }
    let mut body = rule(json!(channel), json!(0.95), "trial");
    body["semantic"].as_object_mut().unwrap().remove("mode");
    let created = app.post("/api/v1/cache_rules", body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(
        created.body["semantic"],
        json!({"channel": channel, "model": "embed-model", "threshold": 0.95, "mode": "trial"}),
        "trial is the default mode"
    );
    let id = created.body["id"].as_i64().unwrap();
    let path = format!("/api/v1/cache_rules/{id}");
    let bad = app
        .patch(
            &path,
            json!({"semantic": {"channel": channel, "model": "e", "threshold": 2}}),
        )
        .await;
    assert_eq!(bad.param(), Some("semantic.threshold"), "{}", bad.text);
    let served = app
        .patch(&path, json!({"semantic": {"channel": channel, "model": "e", "threshold": 0.9, "mode": "serve"}}))
        .await;
    assert_eq!(served.body["semantic"]["mode"], "serve", "{}", served.text);
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let part = snapshot.cache_rules()[0].semantic.clone().unwrap();
    assert_eq!(
        (part.channel, part.threshold),
        (channel, 0.9),
        "in the snapshot"
    );
    let removed = app.patch(&path, json!({"semantic": null})).await;
    assert_eq!(removed.body["semantic"], json!(null), "{}", removed.text);
}

fn trial_batch(id: &str, rule: i64, looked_up: u64, would_hit: u64, agreed: u64) -> v1::UsageBatch {
    v1::UsageBatch {
        batch_id: id.to_owned(),
        client_id: "p".to_owned(),
        semantic_trials: vec![v1::SemanticTrialRecord {
            // A whole minute: 2027-01-15T08:00:00Z.
            bucket_start_unix_s: 1_800_000_000,
            rule_id: rule,
            looked_up,
            would_hit,
            compared: would_hit,
            agreed,
            score_milli_sum: would_hit * 960,
            similarity_milli_sum: would_hit * 900,
        }],
        ..v1::UsageBatch::default()
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn the_trial_report_sums_the_proxies_counts(pool: PgPool) {
    let (app, channel) = with_channel(test_app(pool.clone()), "http://127.0.0.1:9").await;
    let id = app
        .create(
            "/api/v1/cache_rules",
            rule(json!(channel), json!(0.95), "trial"),
        )
        .await;
    let path = format!("/api/v1/cache_rules/{id}/trial");
    let empty = app.get(&path).await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.text);
    assert_eq!(
        empty.body,
        json!({"rule_id": id, "mode": "trial", "looked_up": 0, "would_hit": 0, "agreed": 0,
               "mean_score": null, "mean_similarity": null, "first_seen": null, "last_seen": null})
    );
    apply_batch(&pool, &trial_batch("p1-1", id, 80, 30, 27))
        .await
        .unwrap();
    apply_batch(&pool, &trial_batch("p2-1", id, 40, 10, 9))
        .await
        .unwrap();
    // A retried batch is applied once.
    apply_batch(&pool, &trial_batch("p2-1", id, 40, 10, 9))
        .await
        .unwrap();
    let report = app.get(&path).await;
    let b = &report.body;
    assert_eq!(
        (
            b["looked_up"].as_i64(),
            b["would_hit"].as_i64(),
            b["agreed"].as_i64()
        ),
        (Some(120), Some(40), Some(36)),
        "{}",
        report.text
    );
    assert_eq!(
        (b["mean_score"].as_f64(), b["mean_similarity"].as_f64()),
        (Some(0.96), Some(0.9))
    );
    assert_eq!(b["first_seen"], "2027-01-15T08:00:00.000000Z");
    assert_eq!(b["first_seen"], b["last_seen"]);

    let plain = app
        .create(
            "/api/v1/cache_rules",
            json!({"name": "exact", "model_pattern": "x",
            "endpoints": ["messages"], "ttl_seconds": 5}),
        )
        .await;
    let conflict = app.get(&format!("/api/v1/cache_rules/{plain}/trial")).await;
    assert_eq!(conflict.status, StatusCode::CONFLICT, "{}", conflict.text);
    assert!(conflict.text.contains("semantic"), "{}", conflict.text);
    let missing = app.get("/api/v1/cache_rules/999999/trial").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrations = "../migrations")]
async fn explain_scores_a_prompt_against_the_rules_shared_vectors(pool: PgPool) {
    let mock = MockUpstream::start().await.unwrap();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!(
        "semantic-explain-{}-{}",
        std::process::id(),
        switchyard_state::unix_ms()
    );
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    let (app, channel) =
        with_channel(test_app_with_live(pool.clone(), live), &mock.base_url()).await;
    let id = app
        .create(
            "/api/v1/cache_rules",
            rule(json!(channel), json!(0.9), "serve"),
        )
        .await;
    app.refresh().await;

    // A proxy's stored vector of the prompt it answered, on the rule's stream.
    let mut vector =
        sim::word_vector("What is the capital of France?", sim::EMBEDDING_DIMENSIONS).unwrap();
    assert!(normalise(&mut vector));
    let entry = SemanticEntry {
        partition: [7; 32],
        key: [8; 32],
        expires_at: switchyard_state::unix_ms() + 60_000,
        vector,
    };
    let writer =
        RedisCache::start(&url, &prefix, 1 << 20, std::time::Duration::from_secs(1)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while writer.share_vector(id, entry.encode()).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "no Redis at {url}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let explain = |prompt: &str| {
        format!(
            "/api/v1/routes/explain?model=gpt-4o&seed=1&prompt={}",
            prompt.replace(' ', "%20")
        )
    };
    let mut semantic = Value::Null;
    while std::time::Instant::now() < deadline {
        let reply = app
            .get(&explain("what is the capital of France, please?"))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        semantic = reply.body["semantic_cache"].clone();
        if semantic["evaluated"] == true {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(semantic["rule_id"], id, "{semantic}");
    assert_eq!(semantic["evaluated"], true, "{semantic}");
    assert_eq!(semantic["vectors"], 1);
    assert_eq!(semantic["score"], 0.953);
    assert_eq!(semantic["would_hit"], true);
    let far = app.get(&explain("Write a haiku about autumn leaves")).await;
    assert_eq!(
        far.body["semantic_cache"]["would_hit"], false,
        "{}",
        far.text
    );

    // Without Redis the semantic part cannot be evaluated, and explain says so.
    let alone = test_app(pool);
    alone.refresh().await;
    let reply = alone.get(&explain("anything")).await;
    let part = &reply.body["semantic_cache"];
    assert_eq!(part["evaluated"], false, "{}", reply.text);
    assert!(
        part["reason"].as_str().unwrap().contains("no Redis"),
        "{}",
        reply.text
    );
}
