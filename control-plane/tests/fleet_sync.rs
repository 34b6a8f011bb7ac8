//! `/api/v1/state` shows each live fleet member's own account of its sync (real Redis): the
//! report a proxy publishes with its lease reaches the control plane and parses into the
//! documented type, unknown fields refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use sqlx::PgPool;
use switchyard_control_plane::api::schema::SharedStateResponse;
use switchyard_control_plane::live::LiveState;
use switchyard_state::{RedisConfig, RedisStore};

use common::test_app_with_live;

#[sqlx::test(migrations = "../migrations")]
async fn the_state_body_shows_every_proxys_sync_report(pool: PgPool) {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = format!("fleetsync-{}-{:x}", std::process::id(), rand_suffix());
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    assert!(live.wait_synced(Duration::from_secs(10)).await);
    // A proxy on the same fleet, with quick lease refreshes (each carries its report).
    let mut config = RedisConfig::new(&url, &prefix);
    config.lease_refresh = Duration::from_millis(100);
    let proxy = RedisStore::start(config).unwrap();
    assert!(proxy.wait_resynced(1, Duration::from_secs(10)).await);
    // A write through the control plane's store reaches the proxy as a notification.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    live.store().extend_cooldown(11, now + 60_000);

    let app = test_app_with_live(pool, live.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let report = loop {
        let state = app.get("/api/v1/state").await;
        assert_eq!(state.status, 200, "{}", state.text);
        let parsed: SharedStateResponse = serde_json::from_value(state.body.clone())
            .unwrap_or_else(|e| panic!("the body does not match its schema: {e}\n{}", state.body));
        let found = parsed
            .fleet_sync
            .expect("fleet_sync with REDIS_URL")
            .into_iter()
            .find(|r| r.instance == proxy.instance_id() && r.updates_total >= 1);
        if let Some(r) = found {
            break r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the proxy's report never showed its received update: {}",
            state.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(report.connected, "{report:?}");
    assert!(report.resyncs_total >= 1, "{report:?}");
    assert!(report.last_sync_age_ms.is_some(), "{report:?}");
    assert_eq!(report.redis_errors_total, 0, "{report:?}");
    proxy.close(Duration::from_secs(2)).await;
    live.close(Duration::from_secs(2)).await;
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
}
