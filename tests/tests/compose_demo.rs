//! The local fleet of deploy/compose (docs/src/getting-started/compose.md), run without Docker by
//! `scripts/compose-demo`: the demo configuration `deploy/compose/fleet.yaml` applied with
//! `config apply`, a control plane and two proxies sharing Redis as `compose.yaml` sets them up,
//! the mock upstream as their real HTTP upstream, and the page's demo block run as written — its
//! output must be exactly the page's (the first call on `primary`, failover to `backup` when the
//! mock fails it, the other proxy skipping `primary` through the cooldown in Redis).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use switchyard_mock_upstream::{MockOptions, MockUpstream};

const CONTROL_PLANE: &str = env!("CARGO_BIN_EXE_e2e-control-plane");
const DATA_PLANE: &str = env!("CARGO_BIN_EXE_e2e-data-plane");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/compose-demo");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_fleets_demo_prints_what_the_book_says() {
    // The compose file's mock-upstream service, in process (the script starts the rest).
    let mock = MockUpstream::start_with(MockOptions {
        models: vec!["demo-primary".into(), "demo-backup".into()],
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let addr = mock.addr().to_string();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg(SCRIPT)
            .env("COMPOSE_DEMO_CONTROL_PLANE", CONTROL_PLANE)
            .env("COMPOSE_DEMO_DATA_PLANE", DATA_PLANE)
            .env("COMPOSE_DEMO_MOCK", addr)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scripts/compose-demo failed ({}):\n{stderr}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        stderr.contains("ok: the compose fleet's demo prints what the page says"),
        "{stderr}"
    );
    // The two channels really were called over HTTP: the primary model answered once and then
    // failed twice (a retry on its channel; a recovery probe of the control plane may add one),
    // the backup model served the two last calls.
    let requests = mock.requests();
    let to = |model: &str| {
        requests
            .iter()
            .filter(|r| r.model.as_deref() == Some(model))
            .count()
    };
    assert!(to("demo-primary") >= 3, "{requests:?}");
    assert_eq!(to("demo-backup"), 2, "{requests:?}");
}
